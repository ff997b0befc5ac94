"""The calibration report's lines on gepa's search: acceptance (its decay, correlation
and batched ratio), the quality model fitted to the traces' scores, the parents' and
children's bookkeeping, and the merges.
"""

from __future__ import annotations

import math
import textwrap

from pxn.api.inference_report import WIDTH, parameter_lines
from pxn.calibrate.traces.acceptance_batched import BatchedFit
from pxn.calibrate.traces.pipeline import Calibration
from pxn.quality import Quality


def acceptance_lines(cal: Calibration) -> list[str]:
    a = cal.acceptance
    c = a.correlation
    decay = f"decaying fit a0={a.decay_a0:.3f} tau={a.decay_tau:.4g} proposals"
    if math.isfinite(a.tau_floor):
        decay += f" (tau searched from {a.tau_floor:.4g})"
    if a.chosen.tau is not None:
        decay += f", held from {a.decay_until:g} proposals on (decay_until: the most the fit saw)"
    return [
        f"acceptance: {a.accepted}/{a.proposals} = {a.rate:.3f} over {a.steps} iterations "
        f"[Wilson 95% {a.wilson[0]:.3f}, {a.wilson[1]:.3f}]; {decay}; {a.reason}",
        f"  within-iteration correlation (beta-binomial): rho={c.rho:.3g}; {c.reason}"
        + (f" -> correlation={c.chosen:.3g}" if c.chosen else ""),
        batched_line(a.batched),
    ]


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
                f"  {fit.contradicting} of {fit.contradicting + len(fit.draws)} posterior draws "
                "put the ceiling at or below the seed's score, which the runs' accepted "
                "proposals rule out: dropped, the medians taken from the rest"
            ]
            if fit.contradicting
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


def batched_line(b: BatchedFit) -> str:
    if not b.identified:
        return f"  batched iterations: {b.reason}"
    (sa, sn), (ba, bn) = b.single, b.batched
    return (
        f"  batched iterations: {ba}/{bn} = {ba / bn:.3f} against single iterations' {sa}/{sn} = "
        f"{sa / sn:.3f}; ratio {b.ratio:.3g} [95% {b.interval[0]:.3g}, {b.interval[1]:.3g}]: "
        f"{b.reason} -> batched={b.ratio:.3g}"
    )


def bookkeeping_lines(cal: Calibration) -> list[str]:
    f, d = cal.front, cal.duplicates
    front = f"front_share: {f.reason}"
    if f.identified:
        front = (
            f"front_share (parents drawn from one front; {f.steps} iterations whose parents "
            f"meet parents drawn earlier from it): MLE {f.share:.3g} "
            f"[95% {f.interval[0]:.3g}, {f.interval[1]:.3g}]; {f.reason}"
        )
    if f.chosen < 1:
        front += f" -> front_share={f.chosen:.3g}"
    dup = f"duplicate_children: {d.reason}"
    if d.shown and d.later:
        dup += f" [Wilson 95% {d.wilson[0]:.3g}, {d.wilson[1]:.3g}]"
    if d.chosen:
        dup += f" -> duplicate_children={d.chosen:.3g}"
    return [front, dup]


def merge_lines(cal: Calibration) -> list[str]:
    """gepa's merge: the runs' setup, and how often a merge passed its subsample."""
    m = cal.merges
    if not m.merge:
        return ["merge: off in the runs (gepa's use_merge)"]
    setup = (
        f"merge: on in the runs (use_merge, at most {m.max_merges} accepted; a program of "
        f"{m.components} component(s))"
    )
    if not m.merges:
        return [f"{setup}: gepa merges only programs of two components or more"]
    judged = (
        f"{m.accepted}/{m.judged} merges passed their subsample"
        if m.judged
        else ("no merge judged")
    )
    return [
        f"{setup}; {judged} -> merge_acceptance=(accepted + 1)/(judged + 2)={m.rate:.3g}",
        "  merge latency: the merge's subsample rollouts are rollouts (phase merge_subsample)",
    ]
