"""`pxn conformance --task quality`: the task of known quality, and the search's verdict.

The quick tests check that the synthetic scores follow the quality model
(the seed's expected score, a mutation's step, inherited residuals, fresh
evaluation noise), that a run's draws do not hang on the order its threads
run in, and that the search's statistics pass a right simulator and flag a
wrong one (simulated traces stand for real runs). The slow test runs the
real gepa 0.1.4 on the task end to end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from conftest import assert_user_error, run_pxn
from sim_helpers import lognormal
from test_conformance import small

from pxn.checks.conformance import DEFAULT_QUALITY_SCENARIO, at_time_scale, judge
from pxn.checks.search_conformance import (
    FIGURES,
    judge_search,
    p_shift,
    pooled_acceptance,
    progress_inside,
)
from pxn.checks.synthetic import RunGrid, run_grid
from pxn.checks.synthetic_quality import (
    COMPONENT,
    Example,
    ProposingModel,
    SyntheticSearch,
    candidate_text,
    label_of,
    quality_work,
)
from pxn.quality import Quality
from pxn.run_summary import RunSummary, summarize
from pxn.runner.lm import CallSite
from pxn.runner.recording.totals import trace_totals
from pxn.scenario import Scenario
from pxn.shape import Shape
from pxn.sim.model import simulate_once
from pxn.sim.predict import Band
from pxn.trace import TraceWriter
from pxn.trace_reading import read_trace

SEED = np.random.SeedSequence(7)


def search_of(quality: Quality, train: int = 10, val: int = 5, seed=SEED) -> SyntheticSearch:
    return SyntheticSearch(quality, {"train": train, "val": val}, seed)


def child_prompt(parent_text: str, note: str) -> str:
    """A reflection prompt as gepa writes it from the synthetic task's template: the parent's
    text first, then the minibatch's records."""
    return f"```\n{parent_text}\n```\n# Input: {note}\nFeedback: scored 0.0"


def children(search: SyntheticSearch, parent_text: str, count: int) -> list[str]:
    return [search.propose(child_prompt(parent_text, f"train example {i}")) for i in range(count)]


def small_quality(**changes) -> Scenario:
    """A quality workload whose real runs take a second or two at time scale 0.01."""
    sizes = dict(budget=150, valset_size=10, trainset_size=24, minibatch=3)
    return small(acceptance=None, quality=DEFAULT_QUALITY_SCENARIO.quality, **(sizes | changes))


# ---- the scores follow the model ----------------------------------------------


@pytest.mark.parametrize(
    "quality",
    [
        Quality(seed_score=0.3),
        Quality(seed_score=0.6, metric="graded", levels=4, difficulty_sd=0.5, eval_noise=0.5),
        Quality(seed_score=0.45, metric="continuous", difficulty_sd=1.5),
    ],
    ids=["binary", "graded-noisy", "continuous"],
)
def test_the_seeds_expected_score_is_seed_score(quality: Quality) -> None:
    # One evaluation on each of 40000 examples: a score is in [0, 1], so its sd is at most
    # 0.5 and the mean's standard error at most 0.0025. Seeded; 4 of them (alpha < 1e-4).
    search = search_of(quality, train=40000)
    scores = [search.score(search.seed_text, Example("train", i)) for i in range(40000)]
    assert abs(np.mean(scores) - quality.seed_score) < 4 * 0.5 / math.sqrt(40000)
    assert search.expected_score(search.seed_text) == pytest.approx(quality.seed_score)
    if quality.metric == "graded":
        assert set(scores) <= {i / 4 for i in range(5)}


def test_a_childs_residuals_correlate_with_its_parents_at_inherit() -> None:
    # Fisher's z of a correlation over n pairs has standard error 1 / sqrt(n - 3); each
    # bound is 4 of them (alpha < 1e-4), seeded. Siblings share inherit^2 of their parent.
    inherit, n = 0.7, 20000
    search = search_of(Quality(seed_score=0.4, inherit=inherit), train=n, val=n)
    first, second = children(search, search.seed_text, 2)
    seed = search.candidates[label_of(search.seed_text)]
    one, two = search.candidates[label_of(first)], search.candidates[label_of(second)]
    for split in ("train", "val"):
        pairs = [
            (one.residuals[split], seed.residuals[split], inherit),
            (two.residuals[split], seed.residuals[split], inherit),
            (one.residuals[split], two.residuals[split], inherit**2),
        ]
        for a, b, rho in pairs:
            r = np.corrcoef(a, b)[0, 1]
            assert abs(math.atanh(r) - math.atanh(rho)) < 4 / math.sqrt(n - 3)
            assert np.std(a) == pytest.approx(1.0, abs=4 / math.sqrt(2 * n))


def test_a_proposals_change_shrinks_with_the_headroom() -> None:
    # 3000 grandchildren of one child: their steps over the headroom h(theta_child) are
    # N(change_mean, change_sd^2). Seeded; the mean within 4 standard errors, the sd's
    # chi-square within its 0.01% tails.
    quality = Quality(seed_score=0.3, change_mean=0.5, change_sd=0.4, ceiling=0.7)
    search = search_of(quality)
    child = search.candidates[label_of(children(search, search.seed_text, 1)[0])]
    headroom = quality.reach(child.quality)
    assert 0 < headroom < 1  # the child moved towards the ceiling: a shorter reach is left
    grandchildren = children(search, candidate_text(child.label), 3000)
    qualities = np.array([search.candidates[label_of(text)].quality for text in grandchildren])
    steps = (qualities - child.quality) / headroom
    assert abs(steps.mean() - 0.5) < 4 * 0.4 / math.sqrt(3000)
    low, high = scipy.stats.chi2.ppf([5e-5, 1 - 5e-5], 2999)
    assert low < 2999 * steps.var(ddof=1) / 0.4**2 < high


def test_each_evaluation_draws_fresh_noise_and_none_without_it() -> None:
    # Continuous scores invert to their latents: 4000 evaluations of one pair spread by
    # eval_noise. Seeded; the sd's chi-square within its 0.01% tails.
    noisy = search_of(Quality(seed_score=0.5, metric="continuous", eval_noise=0.4))
    example = Example("val", 2)
    latents = scipy.stats.norm.ppf([noisy.score(noisy.seed_text, example) for _ in range(4000)])
    low, high = scipy.stats.chi2.ppf([5e-5, 1 - 5e-5], 3999)
    assert low < 3999 * latents.var(ddof=1) / 0.4**2 < high

    quiet = search_of(Quality(seed_score=0.5, metric="continuous"))
    assert len({quiet.score(quiet.seed_text, example) for _ in range(20)}) == 1


def test_a_runs_draws_do_not_hang_on_the_order_of_its_calls() -> None:
    quality = Quality(seed_score=0.4, eval_noise=0.5)
    one, two = search_of(quality), search_of(quality)
    prompts = [child_prompt(one.seed_text, f"train example {i}") for i in range(3)]
    forward = [one.propose(p) for p in prompts]
    backward = [two.propose(p) for p in reversed(prompts)][::-1]
    assert forward == backward
    for text in forward:
        assert one.candidates[label_of(text)].quality == two.candidates[label_of(text)].quality
    examples = [Example("train", i) for i in range(10)]
    assert [one.score(forward[0], e) for e in examples] == [
        two.score(forward[0], e) for e in reversed(examples)
    ][::-1]
    # The same prompt twice (two tasks of one parent on one minibatch): two children.
    again = one.propose(prompts[0])
    assert again != forward[0]
    # Another run's seed: other examples, another child of the same prompt.
    other = search_of(quality, seed=np.random.SeedSequence(8))
    text = other.propose(prompts[0])
    assert other.candidates[label_of(text)].quality != one.candidates[label_of(text)].quality


def test_the_task_scores_by_the_search_and_the_reflection_writes_a_child() -> None:
    scenario = small_quality(reflection=lognormal(0.0001), rollout=lognormal(0.0001))
    work = quality_work(scenario, np.random.default_rng(0), 0.0, SEED)
    task, search = work.task, work.reflection.search
    assert task.seed_candidate == {COMPONENT: search.seed_text}
    assert len(task.train) == 24 and len(task.val) == 10
    called = []
    output = task.program(task.seed_candidate, task.val[3], lambda messages: called.append(1))
    assert called == [1]
    feedback = task.metric(task.val[3], output)
    fresh = search_of(scenario.quality, train=24, val=10)  # the same run's seed: same draws
    assert feedback.score == fresh.score(fresh.seed_text, Example("val", 3))
    assert task.record(task.val[3], output, feedback)["Input"] == "val example 3"

    assert isinstance(work.reflection, ProposingModel)
    prompt = [{"role": "user", "content": child_prompt(search.seed_text, "train example 1")}]
    reply, attempts = work.reflection.complete(
        prompt, clock=lambda: 0.0, on_failure=print, site=CallSite("reflection", 1)
    )
    child = label_of(reply.text)
    assert attempts == 1 and reply.text.startswith("```\n[[candidate ")
    assert search.candidates[child].parent == "0"


# ---- the search's verdict, on simulated "runs" --------------------------------


def simulated_quality_runs(
    scenario: Scenario, shapes: list[Shape], runs: int, tmp: Path
) -> tuple[list[Path], dict[str, float]]:
    """Traces the simulator writes on a seed the judge does not use, standing in for real
    runs, and each one's chosen candidate's expected score."""
    paths, test_scores = [], {}
    for shape in shapes:
        for run in range(runs):
            path = tmp / f"{shape}-{run}.jsonl"
            with TraceWriter(path) as writer:
                summary = simulate_once(
                    scenario.replace(seed=scenario.seed + 1), shape, run, writer
                )
            paths.append(path)
            test_scores[str(path)] = summary.test_score
    return paths, test_scores


def test_the_search_verdict_passes_the_right_simulator_and_flags_a_wrong_one(
    tmp_path: Path,
) -> None:
    # Seeded throughout: the "runs" are simulator replicates on a seed the judge never uses.
    truth = small_quality()
    shapes = [Shape(1, 1), Shape(2, 2)]
    paths, test_scores = simulated_quality_runs(truth, shapes, 12, tmp_path)

    right = judge_search(judge(truth, paths, replicates=150), test_scores)
    assert right.conforms, right.verdict
    assert [(g.shape, len(g.runs)) for g in right.groups] == [(s, 12) for s in shapes]
    assert [f.figure for f in right.groups[0].figures] == list(FIGURES)
    assert set(right.run_figures) == set(map(str, paths))
    assert all(0 <= share <= 1 for g in right.groups for share in g.progress_inside)

    # Proposals told to help six times as much: more accepted, better scores.
    stronger = Quality(**(truth.quality.to_dict() | {"change_mean": 0.6}))
    wrong = judge_search(judge(truth.replace(quality=stronger), paths, 150), test_scores)
    assert not wrong.conforms
    off = {f.figure for g in wrong.groups for f in g.flagged}
    assert off & {"best_score", "test_score"}, wrong.verdict  # the scores it promised too high
    assert "does NOT conform" in wrong.verdict and "lower than simulated" in wrong.verdict


def test_the_pooled_acceptance_counts_each_run_as_a_cluster() -> None:
    def run(accepted: int, proposals: int) -> RunSummary:
        return RunSummary(1.0, 10, 1, proposals, accepted, 100, {}, 0.5)

    same = [run(3, 10), run(2, 10), run(4, 10)]
    assert pooled_acceptance(same, same).p_value == pytest.approx(1.0)
    pooled = pooled_acceptance([run(9, 10), run(8, 10), run(10, 10)], same)
    assert pooled.measured == pytest.approx(0.9) and pooled.simulated == pytest.approx(0.3)
    # Variance of a ratio estimator: sum (a - r p)^2 / (n (n - 1) mean(p)^2), each side.
    variance = 2 * ((0**2 + 1**2 + 1**2) / (3 * 2 * 10**2))
    assert pooled.z == pytest.approx(0.6 / math.sqrt(variance))
    assert math.isnan(pooled_acceptance([run(1, 10)], same).p_value)  # one run: no spread


def test_a_shift_needs_two_values_and_the_band_counts_its_times() -> None:
    assert p_shift([1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0
    assert p_shift([5.0] * 10, list(np.linspace(0, 1, 50))) < 1e-4
    band = Band(times=(0.0, 1.0, 2.0, 3.0), mean=(0.5,) * 4, low=(0.4,) * 4, high=(0.6,) * 4)
    inside = RunSummary(3.0, 1, 1, 1, 1, 1, {}, 0.5, progress=((0.5, 0.5), (2.5, 0.7)))
    # Shown from its seed's validation at 0.5 s: 0.5 at 1 s and 2 s (inside), 0.7 at 3 s.
    assert progress_inside(inside, band) == pytest.approx(2 / 3)


# ---- the command's input ---------------------------------------------------------


def test_a_task_that_does_not_fit_the_scenario_is_one_line(scenario_file: Path) -> None:
    assert_user_error(run_pxn("conformance", "--task", "levels2"), "--task is levels or quality")
    assert_user_error(
        run_pxn("conformance", str(scenario_file), "--task", "quality"),
        "--task quality needs a scenario with a [quality] table",
    )


def test_the_quality_default_has_the_simulators_quality_model() -> None:
    truth = at_time_scale(DEFAULT_QUALITY_SCENARIO, 0.01)
    assert truth.quality == DEFAULT_QUALITY_SCENARIO.quality and truth.acceptance is None
    assert truth.trainset_size % truth.minibatch == 0  # no padded minibatch (see the README)


# ---- the real engine ----------------------------------------------------------------


@pytest.mark.slow
def test_real_gepa_on_the_quality_task_conforms_and_a_wrong_model_is_flagged(
    tmp_path: Path,
) -> None:
    truth = at_time_scale(small_quality(), 0.01)
    shapes = [Shape(1, 1), Shape(2, 2), Shape(1, 4)]
    runs = run_grid(truth, RunGrid(shapes, [4], runs=4), tmp_path, make_work=quality_work)
    assert len(runs) == 12

    for run in runs:
        trace = read_trace(run.trace)
        assert trace.run_end.status == "completed" and run.trace_check == "ok"
        result, summary = run.result.result, summarize(trace)
        assert trace_totals(trace).accepted == result["accepted"]
        # gepa chooses by the mean validation score: the best is the chosen one's.
        assert summary.best_score == result["best_val_score"]
        truth_file = json.loads((run.result.out / "search.json").read_text())
        truths = {c["label"]: c for c in truth_file["candidates"]}
        best = label_of(result["best_candidate"][COMPONENT])
        assert run.search.test_score == truths[best]["expected_score"]

    test_scores = {str(run.trace): run.search.test_score for run in runs}
    paths = [run.trace for run in runs]
    right = judge(truth, paths, replicates=200)
    search = judge_search(right, test_scores)
    # Every (shape, figure) and every shape's pooled acceptance passes its test at
    # 0.01 / 2 / 15 and 0.01 / 3 (Bonferroni); acceptance lies inside its 5-95% interval in
    # at least 8 of the 12 runs (at 90% coverage, fewer has chance 0.004). gepa's runs on
    # this seed are deterministic in their search, so the test is too.
    assert search.conforms, search.verdict
    acceptance = [f for g in search.groups for f in g.figures if f.figure == "acceptance"]
    assert sum(f.inside for f in acceptance) >= 8, search.verdict

    # Told that mutations barely move a program (step mean 0, sd 0.2), the simulator
    # predicts searches that stay near the seed: gepa's runs score and accept above them.
    weaker = Quality(**(truth.quality.to_dict() | {"change_mean": 0.0, "change_sd": 0.2}))
    wrong = judge_search(judge(truth.replace(quality=weaker), paths, 200), test_scores)
    assert not wrong.conforms
    assert "higher than simulated" in wrong.verdict, wrong.verdict
