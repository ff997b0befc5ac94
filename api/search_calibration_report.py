"""The calibration report's lines on the search's quality model: how it was inferred from
the runs' scores, its posterior (inference_report.py's words), and the seed's validation.
"""

from __future__ import annotations

import textwrap

from pxn.api.inference_report import WIDTH, parameter_lines
from pxn.calibrate.traces.pipeline import Calibration
from pxn.quality import Quality


def quality_lines(cal: Calibration) -> list[str]:
    """The search's quality model, when it decides acceptance: how it was inferred from the
    runs' scores, its posterior, and how many of the runs' figures its predictive holds."""
    fit = cal.quality
    if fit is None:
        return []
    inference, q = fit.inference, fit.quality
    outcome = inference.outcome
    inside = sum(check.inside for check in inference.checks)
    metric = f"graded, {q.levels} levels" if q.metric == "graded" else q.metric
    return [
        f"search: the quality model decides acceptance (the rates above are kept in the "
        f"report only); metric {metric}, read off the scores",
        *textwrap.wrap(
            f"inferred from {len(inference.summaries.facts)} figures of "
            f"{len(inference.summaries.runs)} run(s) (seed and best scores, acceptance, skips, "
            "validation gain over the parent, examples' spread, repeated evaluations' "
            f"agreement) by ABC-SMC: {len(outcome.history) - 1} generations, "
            f"{outcome.simulations} simulated runs, {outcome.verdict}",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        ),
        *(f"  {line}" for line in parameter_lines(inference)),
        f"  the runs' figures inside their posterior predictive 5-95%: {inside} of "
        f"{len(inference.checks)}",
        *(
            [
                f"  {fit.no_headroom} of {len(fit.draws)} posterior draws put the ceiling at "
                "or below the seed's score: the point's medians taken from the rest, as the "
                "runs found headroom; the draws keep them (on noisy scores a search that "
                "changes nothing still accepts proposals, and a next run may find nothing)"
            ]
            if fit.no_headroom
            else []
        ),
        seed_validation_line(q),
    ]


def seed_validation_line(q: Quality) -> str:
    """Whether runs predicted from the scenario start from the seed as measured."""
    if not q.seed_validation:
        return (
            "  seed validation: not kept, the runs measured it differently (other valsets, noise)"
        )
    mean = sum(q.seed_validation) / len(q.seed_validation)
    return (
        f"  seed validation: kept as every run measured it ({mean:.3g} over "
        f"{len(q.seed_validation)} examples) -> [quality] seed_validation"
    )
