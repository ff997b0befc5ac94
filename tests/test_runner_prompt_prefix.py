"""The prompt prefix a reflection shares with its parent's previous one (pxn.runner.prompt_prefix),
counted on hand-made prompts and on prompts rendered by gepa 0.1.4's own template."""

from __future__ import annotations

from gepa.strategies.instruction_proposal import InstructionProposalSignature

from pxn.runner.prompt_prefix import SharedPrefixes, prompt_text, shared_prefix_chars

HEAD = "Improve this text:\n"  # 19 characters


def test_two_prompts_of_a_parent_share_their_common_prefix_in_tokens():
    prefixes = SharedPrefixes()
    first, second = HEAD + "apple pie", HEAD + "apricot jam"  # share HEAD + "ap": 21 characters
    assert prefixes.tokens("0", "1-0", first, tokens_in=10) is None  # the parent's first prompt
    # 21 of the second prompt's 30 characters at 60 tokens: 21 * 60 / 30 = 42 tokens.
    assert len(second) == 30
    assert prefixes.tokens("0", "1-1", second, tokens_in=60) == 42
    # The third is compared with the second (the parent's last), not the first.
    third = HEAD + "apricot tart"
    assert prefixes.tokens("0", "2-0", third, tokens_in=31) == len(HEAD + "apricot ")


def test_another_parents_prompt_does_not_count():
    prefixes = SharedPrefixes()
    assert prefixes.tokens("0", "1-0", HEAD + "apple", tokens_in=24) is None
    assert prefixes.tokens("1", "1-1", HEAD + "apple", tokens_in=24) is None  # same text
    assert prefixes.tokens("1", "1-2", HEAD + "apples", tokens_in=25) == len(HEAD + "apple")
    assert prefixes.tokens("0", "1-3", HEAD + "banana", tokens_in=25) == len(HEAD)


def test_a_job_asked_again_is_compared_with_the_job_before_it_not_with_itself():
    """gepa asks a failed step's jobs again, each with the same prompt."""
    prefixes = SharedPrefixes()
    assert prefixes.tokens("0", "1-0", HEAD + "apple", tokens_in=None) is None  # failed
    assert prefixes.tokens("0", "1-0", HEAD + "apple", tokens_in=24) is None  # still the first
    assert prefixes.tokens("0", "1-1", HEAD + "apron", tokens_in=24) == len(HEAD + "ap")
    assert prefixes.tokens("0", "1-1", HEAD + "apron", tokens_in=24) == len(HEAD + "ap")
    # The next job is compared with the last prompt, whichever job sent it.
    assert prefixes.tokens("0", "1-2", HEAD + "april", tokens_in=24) == len(HEAD + "apr")


def test_an_unknown_parent_token_count_or_prompt_gives_none_and_a_seen_prompt_still_counts():
    prefixes = SharedPrefixes()
    assert prefixes.tokens(None, "1-0", HEAD + "a", tokens_in=20) is None
    assert prefixes.tokens(None, "1-1", HEAD + "a", tokens_in=20) is None  # never chained
    assert prefixes.tokens("0", "1-2", HEAD + "a", tokens_in=None) is None  # first, no tokens
    assert prefixes.tokens("0", "1-3", HEAD + "b", tokens_in=None) is None  # tokens unknown
    assert prefixes.tokens("0", "2-0", None, tokens_in=20) is None  # prompt unseen: not kept
    assert prefixes.tokens("0", "2-1", HEAD + "c", tokens_in=20) == len(HEAD)  # vs HEAD + "b"


def test_shared_prefix_chars_stops_at_the_first_difference_or_the_shorter_end():
    assert shared_prefix_chars("abcdef", "abcxef") == 3
    assert shared_prefix_chars("abc", "abcdef") == 3
    assert shared_prefix_chars("abc", "abc") == 3
    assert shared_prefix_chars("xbc", "abc") == 0
    assert shared_prefix_chars("", "abc") == 0


def test_a_prompt_is_its_messages_contents_joined():
    assert prompt_text("plain") == "plain"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert prompt_text(messages) == "be brief\nhi"


def render(parent: str, examples: list[dict[str, str]]) -> str:
    return InstructionProposalSignature.prompt_renderer(
        {"current_instruction_doc": parent, "dataset_with_feedback": examples}
    )


def test_on_gepas_template_siblings_share_head_parent_middle_and_the_examples_header():
    """Two reflections of one parent on different minibatches: gepa 0.1.4's default template
    renders head + parent text + middle + the examples; they part inside the first example."""
    parent = "Answer with the capital city of the country named."
    one = [{"Inputs": "France", "Feedback": "Correct."}, {"Inputs": "Peru", "Feedback": "No."}]
    two = [{"Inputs": "Japan", "Feedback": "No."}, {"Inputs": "Chad", "Feedback": "Correct."}]
    a, b = render(parent, one), render(parent, two)
    template = InstructionProposalSignature.default_prompt_template
    before_examples = template.split("<side_info>")[0].replace("<curr_param>", parent)
    shared = shared_prefix_chars(b, a)
    assert b[:shared] == before_examples + "# Example 1\n## Inputs\n"
    prefixes = SharedPrefixes()
    prefixes.tokens("0", "1-0", a, tokens_in=len(a))
    assert prefixes.tokens("0", "1-1", b, tokens_in=len(b)) == shared  # a token per character
