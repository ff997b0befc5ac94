"""One word per thing: docs/glossary.md's words are the ones the reports and the docs use.

The glossary names, for each word, the flag and scenario key that carry it and the words
it replaces. Every flag it names exists; every key is a scenario's; and no replaced word
appears in what the real commands print or in README.md and docs/*.md, outside the
glossary itself and the phrases still printed by code other engineers are changing
(PENDING, each checked to still exist where it is listed, so it leaves the list with the
phrase).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import pxn_flags, run_pxn
from sim_helpers import EVERYTHING

from pxn.failures import Failures
from pxn.sim.presets import load_scenario

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TRACES = [
    ROOT / "experiments" / "local_validation" / "runs" / run for run in ("1x1-w2-s0", "2x2-w2-s0")
]

# Phrases with a replaced word that sim/ and calibrate/ (other engineers' now) still
# print, and the docs quote: (a pattern of the phrase, the file that prints it, the text
# there).
PENDING: list[tuple[str, str, str]] = []


@dataclass(frozen=True)
class Entry:
    word: str
    flags: list[str]
    keys: list[str]
    replaces: list[str]


def glossary() -> list[Entry]:
    """The rows of the glossary's tables: | word | symbol | meaning | flag | key | replaces |."""
    entries = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in {"word", "---"}:
            continue
        word, _, _, flags, keys, replaces = cells
        entries.append(
            Entry(
                word,
                re.findall(r"`(--[a-z-]+)`", flags),
                re.findall(r"`([a-z_.]+)`", keys),
                re.findall(r'"([^"]+)"', replaces),
            )
        )
    return entries


ENTRIES = glossary()


def replaced_pattern(phrase: str) -> re.Pattern[str]:
    """A replaced phrase as a whole-word pattern: "(s)" an optional plural, any space a break."""
    words = re.escape(phrase.replace("(s)", "\0")).replace("\0", "s?").replace(r"\ ", r"\s+")
    return re.compile(rf"\b{words}\b", re.IGNORECASE)


REPLACED = [
    (replaced_pattern(phrase), entry.word) for entry in ENTRIES for phrase in entry.replaces
]
PENDING_PATTERN = re.compile("|".join(pattern for pattern, _, _ in PENDING) or r"(?!x)x")


def replaced_words(text: str) -> list[str]:
    """Each replaced word in `text` (its line and the glossary's word), pending phrases aside."""
    pending = [m.span() for m in PENDING_PATTERN.finditer(text)]
    found = []
    for pattern, word in REPLACED:
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in pending):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"line {line}: {match.group()!r} (say {word!r})")
    return found


def test_the_glossary_has_the_words_of_the_design() -> None:
    words = {entry.word for entry in ENTRIES}
    assert {"budget", "validation size", "reflection minibatch", "workers"} <= words
    assert {"reflection concurrency", "shape", "k", "iteration", "proposal", "child"} <= words
    assert {"replicate", "parameter draw", "stage", "metric call", "full validation"} <= words
    assert {"acceptance", "seed candidate", "random seed", "front", "scenario", "trace"} <= words
    assert "run spread" in words
    assert {"step(s)", "mutation(s)", "reflection slot(s)"} <= {
        phrase for entry in ENTRIES for phrase in entry.replaces
    }


def test_every_flag_the_glossary_names_exists() -> None:
    named = {flag for entry in ENTRIES for flag in entry.flags}
    assert {"--budget", "--workers", "--reflection-concurrency", "--reps", "--draws"} <= named
    assert named - pxn_flags() == set()


def test_every_scenario_key_the_glossary_names_is_one() -> None:
    merging = EVERYTHING.replace(
        merge=True, components=2, merge_acceptance=0.5, failures=Failures(0.1, 0.2)
    )
    written = [EVERYTHING.to_dict(), load_scenario("livebench-math").to_dict(), merging.to_dict()]

    def found(path: str) -> bool:
        for data in written:
            for part in path.split("."):
                if not isinstance(data, dict) or part not in data:
                    break
                data = data[part]
            else:
                return True
        return False

    keys = [key for entry in ENTRIES for key in entry.keys]
    assert {"budget", "valset_size", "minibatch", "workers", "uncertainty.draws"} <= set(keys)
    assert [key for key in keys if not found(key)] == []


def test_the_replaced_words_are_matched_as_written() -> None:
    assert replaced_words("one step, then 2 steps; a stepped line")[:2] == [
        "line 1: 'step' (say 'iteration')",
        "line 1: 'steps' (say 'iteration')",
    ]
    assert replaced_words("4 reflection\n  slots") == [
        "line 1: 'reflection\\n  slots' (say 'reflection concurrency')"
    ]
    assert replaced_words("L_step, step_rate") == []


@pytest.mark.parametrize("page", [p for p in PAGES if p != GLOSSARY], ids=lambda p: p.name)
def test_no_page_uses_a_replaced_word(page: Path) -> None:
    assert replaced_words(page.read_text(encoding="utf-8")) == []


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the real commands print, on a preset and on committed traces."""
    out = tmp_path_factory.mktemp("printed")
    commands = {
        "simulate": ["simulate", "hover", "--shape", "2x2", "--reps", "4"],
        "sweep --wide": ["sweep", "hover", "--reps", "2", "--wide"],
        "advise": ["advise", "hover", "--budget", "3000", "--reps", "2", "--wide"],
        "calibrate": ["calibrate", *TRACES, "-o", out / "calibrated.toml", "--draws", "4"],
        "presets": ["presets"],
    }
    shown = {}
    for name, args in commands.items():
        ran = run_pxn(*args)
        assert ran.returncode == 0, ran.stderr
        shown[name] = ran.stdout + ran.stderr
    shown["calibrated scenario"] = (out / "calibrated.toml").read_text(encoding="utf-8")
    return shown


@pytest.mark.parametrize(
    "command", ["simulate", "sweep --wide", "advise", "calibrate", "calibrated scenario", "presets"]
)
def test_no_report_prints_a_replaced_word(command: str, printed: dict[str, str]) -> None:
    assert printed[command].strip()
    assert replaced_words(printed[command]) == []


@pytest.mark.parametrize(("pattern", "source", "text"), PENDING, ids=[t for _, _, t in PENDING])
def test_a_pending_phrase_is_still_printed_where_it_is_listed(
    pattern: str, source: str, text: str
) -> None:
    # Once renamed there, the phrase leaves PENDING and the check above covers it.
    assert text in (ROOT / source).read_text(encoding="utf-8")
