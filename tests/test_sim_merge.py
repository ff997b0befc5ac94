"""gepa's merge in the simulator: its choices checked against gepa 0.1.4's own functions, and a
simulated run's merges (the schedule itself against a real gepa run is in
test_runner_merge.py)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gepa.proposer.merge import (
    MergeProposer,
    does_triplet_have_desirable_predictors,
    sample_and_attempt_merge_programs_by_common_predictors,
)
from sim_helpers import make_scenario, searched
from test_sim_model import rollouts_by, traced

from pxn.acceptance import Acceptance
from pxn.errors import PxnError
from pxn.quality import Quality
from pxn.shape import Shape
from pxn.sim.merge import Lineage, subsample
from pxn.sim.model import simulate_once
from pxn.sim.quality_search import QualitySearch
from pxn.trace import Decision, Merge, Reflection, Rollout, Stage, Validation

# -- gepa's choices ---------------------------------------------------------------------


def grown(seed: int, components: int = 3, size: int = 14) -> Lineage:
    """A lineage of reflective children, each of a random earlier candidate."""
    rng = np.random.default_rng(seed)
    lineage = Lineage(components, rng)
    for c in range(1, size):
        parent = int(rng.integers(c))
        lineage.add((parent,), lineage.rewrite(parent))
    return lineage


def as_gepa(lineage: Lineage) -> tuple[list[dict[str, str]], list[list[int | None]]]:
    """The lineage as gepa's state holds it: candidates' texts and parents."""
    programs = [{f"c{k}": str(t) for k, t in enumerate(texts)} for texts in lineage.texts]
    parents = [list(p) or [None] for p in lineage.parents]
    return programs, parents


@pytest.mark.parametrize("seed", range(20))
def test_which_triplets_merge_and_into_what_is_gepas(seed: int) -> None:
    """Every triplet merges something exactly when gepa's check says so; for every pair,
    gepa finds a merge exactly when some ancestor passes the filters, through one of those,
    and builds the texts the lineage builds."""
    lineage = grown(seed)
    programs, parents = as_gepa(lineage)
    size = len(programs)
    for a in range(size):
        for i in range(size):
            for j in range(size):
                ours = lineage.merges_something(a, i, j)
                assert ours == does_triplet_have_desirable_predictors(programs, a, i, j)
    # Distinct (no coin) and above 0 (gepa 0.1.4 raises when every ancestor scores 0).
    scores = (np.random.default_rng(seed).permutation(size) + 1).tolist()
    found = 0
    for i in range(size):
        for j in range(i + 1, size):
            common = lineage.common_ancestors(i, j, scores)
            theirs = sample_and_attempt_merge_programs_by_common_predictors(
                agg_scores=scores,
                rng=random.Random(seed),
                merge_candidates=[i, j],
                merges_performed=([], []),
                program_candidates=programs,
                parent_program_for_candidate=parents,
            )
            assert (theirs is None) == (not common), (i, j)
            if theirs is None:
                continue
            program, first, second, ancestor = theirs
            assert (first, second) == (i, j) and ancestor in common
            texts, _ = lineage.merged_texts(first, second, ancestor, scores)
            assert program == {f"c{k}": str(t) for k, t in enumerate(texts)}
            found += 1
    assert found > 0


def test_a_program_of_one_component_never_merges() -> None:
    lineage = grown(0, components=1)
    size = len(lineage.texts)
    assert not any(lineage.common_ancestors(i, j, None) for i in range(size) for j in range(size))


@pytest.mark.parametrize("seed", range(20))
def test_the_subsample_takes_from_each_bucket_as_gepa_does(seed: int) -> None:
    """The examples a merge is scored on: at least as many where each parent did better and
    where they tied as gepa's rule takes first (2 of each, in that order, while 5 are not
    taken), then any; gepa's own choice meets the same counts (its draws are its own)."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 12))
    first, second = (rng.integers(0, 3, size) / 2 for _ in range(2))
    proposer = MergeProposer(None, None, None, True, 5, rng=random.Random(seed))
    theirs = proposer.select_eval_subsample_for_merged_program(
        dict(enumerate(first.tolist())), dict(enumerate(second.tolist()))
    )
    ours = subsample(first, second, rng)
    signs = [1, -1, 0]  # the first better, the second better, tied
    sizes = Counter(int(np.sign(a - b)) for a, b in zip(first, second, strict=True))
    required, taken = {}, 0
    for sign in signs:
        required[sign] = min(sizes[sign], 2, 5 - taken)
        taken += required[sign]
    for examples in (ours, theirs):
        counts = Counter(int(np.sign(first[e] - second[e])) for e in examples)
        assert len(examples) == 5 and all(counts[s] >= required[s] for s in signs), examples
    if size >= 5:
        assert len(set(ours)) == 5


# -- the quality model's merge --------------------------------------------------------------


def pool(pick: float) -> QualitySearch:
    """A search of two validated children of the seed."""
    model = Quality(seed_score=0.4, merge_pick=pick)
    search = QualitySearch(model, 40, 30, np.random.default_rng(3))
    search.seed_validation()
    for _ in range(2):
        children, _ = search.propose([0], [[0]])
        search.add(children, [0])
    return search


@pytest.mark.parametrize("pick", [0.0, 1.0])
def test_a_merge_takes_the_better_or_the_worse_parent_everywhere(pick: float) -> None:
    search = pool(pick)
    child = search.merge(1, 2)
    latent = {c: search.quality[c] + search.val_residuals[c] for c in (1, 2)}
    merged = child.quality + child.val_residuals
    chosen = np.maximum if pick == 1.0 else np.minimum
    assert np.allclose(merged, chosen(latent[1], latent[2]))
    better = search.quality[1] + search.quality[2] < 2 * child.quality
    assert better == (pick == 1.0)


def test_a_merge_of_a_candidate_with_itself_is_that_candidate() -> None:
    search = pool(0.5)
    child = search.merge(1, 1)
    assert child.quality == pytest.approx(search.quality[1])
    assert np.allclose(child.train_residuals, search.train_residuals[1])
    assert np.allclose(child.val_residuals, search.val_residuals[1])


# -- simulated runs -------------------------------------------------------------------------

MERGING = make_scenario(
    acceptance=Acceptance(0.6), merge=True, components=2, merge_acceptance=0.5, budget=600
)


@pytest.mark.parametrize("shape", [Shape(1, 1), Shape(2, 2)], ids=["single", "2x2"])
def test_a_merge_takes_its_iteration_after_one_that_added_a_candidate(
    shape: Shape, tmp_path: Path
) -> None:
    summary, trace = traced(MERGING, shape, tmp_path)
    merges = trace.of(Merge)
    assert summary.merges == len(merges) > 0
    added = {d.iteration for d in trace.of(Decision) if d.accepted}
    groups = rollouts_by(trace)
    candidates = 1 + sum(d.accepted for d in trace.of(Decision))
    for merge in merges:
        assert merge.iteration - 1 in added  # gepa tries one only after a new program
        assert not [e for e in trace.of(Decision) + trace.of(Reflection)
                    if e.iteration == merge.iteration]  # fmt: skip
        subsample = groups[merge.iteration, "merge_subsample"]
        assert len(subsample) == 5 and {r.candidate for r in subsample} == {merge.proposal}
        full = groups.get((merge.iteration, "full_val"), [])
        assert len(full) == (MERGING.valset_size if merge.accepted else 0)
        first, second = map(int, merge.parents.split(","))
        assert int(merge.ancestor) < first < second
    accepted = [m for m in merges if m.accepted]
    candidates += len(accepted)
    # New candidates are numbered on, merges and children alike.
    joined = sorted(int(e.candidate) for e in [*trace.of(Decision), *merges] if e.accepted)
    assert joined == list(range(1, candidates))
    assert summary.metric_calls == len(trace.of(Rollout))
    assert {s.name for s in trace.of(Stage)} >= {"merge_subsample"}


def test_merges_due_stop_with_max_merges_accepted_but_those_due_are_still_tried() -> None:
    """gepa stops making merges due once max_merges were accepted; merges already due are
    still tried, so a run may accept a few more (gepa 0.1.4 as it is)."""
    runs = [simulate_once(MERGING.replace(max_merges=1), Shape(2, 2), r) for r in range(20)]
    assert all(r.merges_accepted >= 1 for r in runs)
    assert max(r.merges_accepted for r in runs) > 1


def test_a_one_component_program_simulates_as_without_merge() -> None:
    """gepa merges only programs of two components or more: merge = true at one changes no bit."""
    plain = make_scenario(acceptance=Acceptance(0.6))
    one = plain.replace(merge=True)
    for shape in (Shape(1, 1), Shape(2, 2)):
        assert [simulate_once(one, shape, r) for r in range(5)] == [
            simulate_once(plain, shape, r) for r in range(5)
        ]


def test_a_quality_merge_is_judged_by_gepas_rule_on_its_parents_known_scores(
    tmp_path: Path,
) -> None:
    scenario = searched({"change_mean": 0.3}, merge=True, components=2, budget=800)
    # The first replicate (of a few) in which gepa's rule found a pair to merge.
    trace = next(
        t
        for r in range(8)
        if (t := traced(scenario, Shape(2, 2), tmp_path, replicate=r)[1]).of(Merge)
    )
    merges = trace.of(Merge)
    validated = {}  # candidate -> example -> score, from its validation rollouts
    for r in trace.of(Rollout):
        if r.phase in ("seed_val", "full_val"):
            validated.setdefault(r.candidate, {})[r.example] = r.score
    groups = rollouts_by(trace)
    for merge in merges:
        subsample = groups[merge.iteration, "merge_subsample"]
        assert merge.score_after == pytest.approx(sum(r.score for r in subsample))
        sums = [sum(validated[p][r.example] for r in subsample) for p in merge.parents.split(",")]
        assert merge.score_before == pytest.approx(max(sums))
        assert merge.accepted == (merge.score_after >= merge.score_before)
    means = {v.candidate: v.score for v in trace.of(Validation)}
    assert all(m.candidate in means for m in merges if m.accepted)


@pytest.mark.parametrize(
    ("changes", "subject", "fragment"),
    [
        ({"merge": True, "components": 2}, "merge_acceptance", "add merge_acceptance = 0.5"),
        ({"components": 2}, "components", "add merge = true"),
        ({"merge_acceptance": 0.5}, "merge_acceptance", "add merge = true"),
        ({"merge": True, "max_merges": 0}, "max_merges", "whole number >= 1"),
        ({"merge": True, "components": 2, "merge_acceptance": 1.5}, "merge_acceptance", "[0, 1]"),
    ],
)
def test_a_merge_scenario_missing_or_misplacing_a_field_is_refused(
    changes: dict, subject: str, fragment: str
) -> None:
    with pytest.raises(PxnError) as caught:
        make_scenario(**changes)
    assert caught.value.subject == subject and fragment in str(caught.value)


def test_a_quality_scenario_refuses_a_merge_rate() -> None:
    with pytest.raises(PxnError, match=r"quality model judges a merge itself"):
        searched(merge=True, components=2, merge_acceptance=0.5)
