"""The search model: gepa's own front, the quality model's laws, what comes out of them.

gepa's Pareto front is checked against gepa 0.1.4's own functions on random
validation scores; the quality model's expected score against Monte Carlo;
and the phenomena the rate model had to be told (acceptance falling over a
run, batched steps accepting less, perfect parents skipped) are checked to
come out of the quality model by themselves, each with a stated significance.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gepa.gepa_utils import remove_dominated_programs
from scipy import stats
from sim_helpers import searched
from test_sim_model import rollouts_by, traced

from pxn.acceptance import Acceptance
from pxn.quality import Quality
from pxn.run_summary import summarize
from pxn.shape import Shape
from pxn.sim.quality_search import ParetoFront, QualitySearch
from pxn.trace import Decision, Validation

# -- gepa's front ----------------------------------------------------------------------


def gepa_weights(scores: np.ndarray) -> dict[int, int]:
    """gepa 0.1.4's parent weights: its front per example, dominated programs removed
    (ties in mean broken by index, as ParetoFront breaks them), frequency per program."""
    best = scores.max(axis=0)
    fronts = {e: set(np.flatnonzero(scores[:, e] == best[e]).tolist()) for e in range(len(best))}
    means = [float(row.mean()) + 1e-9 * c for c, row in enumerate(scores)]
    kept = remove_dominated_programs(fronts, scores=means)
    return dict(Counter(c for front in kept.values() for c in front))


@pytest.mark.parametrize("levels", [1, 3])
@pytest.mark.parametrize("seed", range(30))
def test_the_front_weighs_parents_as_gepa_does(seed: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    candidates, examples = int(rng.integers(2, 25)), int(rng.integers(3, 40))
    ability = rng.normal(0, 1, (candidates, 1)) - rng.normal(0, 1, (1, examples))
    scores = np.floor((levels + 1) * stats.norm.cdf(ability + rng.normal(0, 1, ability.shape)))
    scores = np.minimum(scores, levels) / levels
    front = ParetoFront()
    for row in scores:
        front.add(row)
    ids, cumulative = front.weights()
    weights = dict(zip(ids, np.diff([0, *cumulative]).tolist(), strict=True))
    assert weights == gepa_weights(scores)
    assert front.best_candidate == int(np.argmax(scores.mean(axis=1)))


def test_the_seed_is_the_only_parent_until_another_is_validated() -> None:
    front = ParetoFront()
    front.add(np.zeros(5))
    assert front.draw(np.random.default_rng(0), 4) == [0, 0, 0, 0]
    front.add(np.array([1.0, 0, 0, 0, 0]))  # better on one example, tied elsewhere
    assert front.weights() == ([1], [5])  # the seed is dominated everywhere


# -- the quality model's laws ------------------------------------------------------------

MODELS = [
    Quality(0.3),
    Quality(0.7, difficulty_sd=2.0, eval_noise=0.5),
    Quality(0.5, metric="graded", levels=3, difficulty_sd=0.5),
    Quality(0.6, metric="continuous", eval_noise=1.0),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.metric)
def test_the_expected_score_is_a_fresh_examples_mean_score(model: Quality) -> None:
    """s(theta) against 400,000 fresh examples (difficulty, residual, noise drawn), within
    4.5 standard errors; and theta_0 gives the seed's score."""
    rng = np.random.default_rng(1)
    n = 400_000
    for theta in (-1.0, model.seed_quality, 1.5):
        latent = theta - rng.normal(0, model.difficulty_sd, n) + rng.standard_normal(n)
        scores = model.score(latent + model.eval_noise * rng.standard_normal(n))
        error = scores.std() / np.sqrt(n)
        assert abs(scores.mean() - model.expected_score(theta)) < 4.5 * error
    assert model.expected_score(model.seed_quality) == pytest.approx(model.seed_score)


@pytest.mark.parametrize(
    "model",
    [
        Quality(0.3, seed_validation=(0, 1, 1, 0, 0, 0)),
        Quality(0.5, metric="graded", levels=3, seed_validation=(0, 1 / 3, 1, 2 / 3, 0, 1)),
        Quality(0.6, metric="continuous", seed_validation=(0.1, 0.5, 0.93, 0.2, 0.7, 0.4)),
    ],
    ids=lambda m: m.metric,
)
def test_a_noiseless_seed_scores_as_it_was_measured(model: Quality) -> None:
    """Its measured validation scores condition the examples: without evaluation noise
    the simulated seed scores exactly so, replicate after replicate."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        search = QualitySearch(model, 10, 6, rng)
        assert search.seed_validation() == pytest.approx(model.seed_validation)


def test_the_examples_drawn_given_the_seeds_scores_keep_the_models_law() -> None:
    """Scores drawn from the model, then difficulties and residuals drawn given them: pooled
    over many draws, those must be the model's own N(0, difficulty_sd^2) and N(0, 1)
    (Kolmogorov-Smirnov, p > 0.001), and a re-evaluation must agree with the measured score
    as often as two evaluations of one example do (Monte Carlo, within 4 standard errors)."""
    model = Quality(0.4, difficulty_sd=1.5, eval_noise=0.7)
    rng = np.random.default_rng(3)
    n, s = 40, model.seed_quality
    difficulties, residuals, agree, expected = [], [], [], []
    for _ in range(500):
        d, z = rng.normal(0, 1.5, n), rng.standard_normal(n)
        first = model.score(s - d + z + 0.7 * rng.standard_normal(n))
        again = model.score(s - d + z + 0.7 * rng.standard_normal(n))
        expected.append(np.mean(first == again))
        drawn_d, drawn_z = replace(model, seed_validation=tuple(first)).seed_examples(rng)
        difficulties += drawn_d.tolist()
        residuals += drawn_z.tolist()
        redone = model.score(s - drawn_d + drawn_z + 0.7 * rng.standard_normal(n))
        agree.append(np.mean(first == redone))
    assert stats.kstest(np.array(difficulties) / 1.5, "norm").pvalue > 0.001
    assert stats.kstest(residuals, "norm").pvalue > 0.001
    error = np.hypot(np.std(agree), np.std(expected)) / np.sqrt(len(agree))
    assert abs(np.mean(agree) - np.mean(expected)) < 4 * error


def test_the_headroom_runs_out_at_the_ceiling() -> None:
    model = Quality(0.4, change_mean=0.2, ceiling=0.8)
    top = model.ceiling_quality
    assert [model.reach(t) for t in (model.seed_quality, top, top + 1)] == pytest.approx([1, 0, 0])
    assert model.expected_score(top) == pytest.approx(0.8)
    assert Quality(0.4).reach(5.0) == 1.0  # no ceiling


# -- what comes out of it -----------------------------------------------------------------


def test_the_trace_holds_the_scores_gepa_judged_by(tmp_path: Path) -> None:
    """Each decision's sums are its rollouts' scores; each validation's mean its full_val
    rollouts'; a skipped pair's parent was perfect; the trace summarises as the run did."""
    scenario = searched({"seed_score": 0.7, "eval_noise": 0.3}, budget=900)
    summary, trace = traced(scenario, Shape(2, 2), tmp_path)
    groups = rollouts_by(trace)
    for decision in trace.of(Decision):
        i = decision.iteration
        mine = [r.score for r in groups[i, "child_minibatch"] if r.candidate == decision.proposal]
        assert decision.score_after == pytest.approx(sum(mine))
        assert decision.accepted == (decision.score_after > decision.score_before)
    for validation in trace.of(Validation):
        phase = "seed_val" if validation.iteration == 0 else "full_val"
        scores = [
            r.score
            for r in groups[validation.iteration, phase]
            if r.candidate == validation.candidate
        ]
        assert validation.score == pytest.approx(np.mean(scores))
    measured = summarize(trace)
    assert measured.best_score == summary.best_score
    assert measured.progress == summary.progress
    assert summary.best_score >= trace.of(Validation)[0].score


def test_a_parent_perfect_on_its_minibatch_is_skipped(tmp_path: Path) -> None:
    """1x1 on an easy task: an iteration reflects exactly when its parent missed a point
    on its minibatch; both happen."""
    scenario = searched({"seed_score": 0.85}, budget=600)
    summary, trace = traced(scenario, Shape(1, 1), tmp_path)
    groups = rollouts_by(trace)
    reflected = {d.iteration for d in trace.of(Decision)}
    perfect = {
        i
        for i in range(1, summary.iterations + 1)
        if min(r.score for r in groups[i, "parent_minibatch"]) >= 1
    }
    assert perfect and reflected
    assert perfect.isdisjoint(reflected)
    assert perfect | reflected == set(range(1, summary.iterations + 1))


def decisions_of(scenario, shape: Shape, replicates: int, tmp_path: Path) -> list[list[Decision]]:
    return [traced(scenario, shape, tmp_path, r)[1].of(Decision) for r in range(replicates)]


def test_acceptance_falls_as_the_search_climbs(tmp_path: Path) -> None:
    """Over 60 runs, a run's second half of proposals is accepted less often than its
    first (two-proportion z test, alpha 0.001): nothing in the model is told to decay."""
    quality = {
        "seed_score": 0.4,
        "change_mean": 0.3,
        "change_sd": 0.3,
        "ceiling": 0.7,
        "inherit": 0.99,
    }
    scenario = searched(quality, budget=1200)
    early, late = np.zeros(2), np.zeros(2)  # accepted, proposals
    for decisions in decisions_of(scenario, Shape(1, 1), 60, tmp_path):
        half = len(decisions) // 2
        early += [sum(d.accepted for d in decisions[:half]), half]
        late += [sum(d.accepted for d in decisions[half:]), len(decisions) - half]
    assert one_sided_z(early, late) < 0.001


def one_sided_z(a: np.ndarray, b: np.ndarray) -> float:
    """P-value of a's share (successes, trials) exceeding b's by chance alone."""
    pooled = (a[0] + b[0]) / (a[1] + b[1])
    z = (a[0] / a[1] - b[0] / b[1]) / np.sqrt(pooled * (1 - pooled) * (1 / a[1] + 1 / b[1]))
    return float(stats.norm.sf(z))


def test_siblings_of_one_parent_succeed_together(tmp_path: Path) -> None:
    """1x4: the count a step accepts is overdispersed against a binomial of the same mean
    (the parent and its headroom are shared; dispersion test, alpha 0.001): no
    correlation is set."""
    quality = {"seed_score": 0.3, "change_mean": 0.5, "ceiling": 0.6, "inherit": 0.995}
    scenario = searched(quality | {"difficulty_sd": 0.5}, budget=1200)
    counts = []
    for decisions in decisions_of(scenario, Shape(1, 4), 60, tmp_path):
        steps = Counter(d.iteration for d in decisions)
        accepted = Counter(d.iteration for d in decisions if d.accepted)
        counts += [accepted[i] for i, n in steps.items() if n == 4]
    counts = np.array(counts)
    p = counts.mean() / 4
    dispersion = np.sum((counts - 4 * p) ** 2) / (4 * p * (1 - p))  # chi-square, n - 1 df
    assert stats.chi2.sf(dispersion, len(counts) - 1) < 0.001


# -- predictions with scores, and advice on them ------------------------------------------


def test_the_progress_band_holds_each_runs_best_so_far() -> None:
    """Hand-made runs: at each time the band's mean is the mean of the step functions."""
    from pxn.run_summary import RunSummary
    from pxn.sim.predict import Band

    def run(progress, end):
        return RunSummary(end, 1, 0, 0, 0, 0, {}, 0.0, progress=progress)

    runs = [run(((1.0, 0.2), (5.0, 0.6)), 10.0), run(((2.0, 0.4),), 8.0)]
    band = Band.of_progress(runs, points=5)  # times 2, 4, 6, 8, 10
    assert band.times == (2.0, 4.0, 6.0, 8.0, 10.0)
    assert band.mean == pytest.approx((0.3, 0.3, 0.5, 0.5, 0.5))
    assert band.low[-1] == pytest.approx(0.41) and band.high[-1] == pytest.approx(0.59)


def test_advice_on_score_recommends_the_fastest_of_the_best_scores(tmp_path: Path) -> None:
    """The allocations whose paired score difference from the best is within noise are the
    ties; the fastest of the best and its ties is recommended and the rest are its
    runners-up; a deadline that the recommendation misses moves it; without [quality] the
    objective is refused."""
    from pxn.errors import PxnError
    from pxn.sim.advise import Ask
    from pxn.sim.advise_ranking import NOISE
    from pxn.sim.advise_search import advise

    scenario = searched({"seed_score": 0.4, "eval_noise": 0.4}, budget=900)
    ask = Ask(budget=900, p=(1, 2, 4), n=(1, 2), b=(1, 3), workers=(8,), objective="score",
              replicates=40)  # fmt: skip
    advice = advise(scenario, ask)
    best = max(advice.assessments, key=lambda x: x.prediction.test_score.mean)
    tied = [x for x in advice.assessments if x is best or abs(x.versus(best, "score")[0])
            <= NOISE * x.versus(best, "score")[1]]  # fmt: skip
    fastest = min(tied, key=lambda x: x.prediction.wall_clock.mean)
    assert advice.recommended is fastest
    assert {id(x) for x in advice.runners_up} == {id(x) for x in tied} - {id(fastest)}
    faster = replace_deadline(ask, fastest.prediction.wall_clock.high * 0.99)
    moved = advise(scenario, faster)
    assert moved.recommended is None or moved.recommended.allocation != fastest.allocation
    with pytest.raises(PxnError, match="no \\[quality\\] model"):
        advise(searched().replace(quality=None, acceptance=Acceptance(0.3)), ask)


def replace_deadline(ask, seconds: float):
    from dataclasses import replace

    return replace(ask, deadline=seconds)


def test_sweep_writes_the_progress_figure(tmp_path: Path) -> None:
    from conftest import run_pxn

    path = tmp_path / "q.toml"
    searched(budget=300).save(path)
    ran = run_pxn("sweep", path, "--shapes", "single,2x2", "--reps", "20", "--out", tmp_path / "o")
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "o" / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    document = json.loads((tmp_path / "o" / "sweep.json").read_text())
    two = document["predictions"][1]
    assert set(two["best_score"]) == {"mean", "low", "high"}
    assert set(two["speedup"]) == {"mean", "low", "high"}
    assert two["speedup"]["low"] <= two["speedup"]["mean"] <= two["speedup"]["high"]


@pytest.mark.parametrize(("trainset", "b"), [(10, 3), (7, 3), (11, 4), (5, 5), (9, 2)])
def test_an_epoch_is_padded_as_gepas_sampler_pads_it(trainset: int, b: int) -> None:
    """Given gepa's own shuffle, the simulator's padded epoch is gepa's, id for id: the
    least frequent ids, the shuffle's last first (so a last minibatch may repeat one)."""
    import random

    from gepa.core.data_loader import ensure_loader
    from gepa.strategies.batch_sampler import EpochShuffledBatchSampler

    from pxn.sim.minibatches import EpochSampler

    gepa = EpochShuffledBatchSampler(b, random.Random(3))
    gepa.next_minibatch_ids(ensure_loader(list(range(trainset))), SimpleNamespace(i=0))
    shuffle = gepa.shuffled_ids[:trainset]

    class GepasShuffle:  # hands the simulator gepa's shuffle as its permutation
        def permutation(self, size: int) -> np.ndarray:
            assert size == trainset
            return np.array(shuffle)

    ours = EpochSampler(trainset, b, GepasShuffle())  # type: ignore[arg-type]
    assert ours.padded_order() == gepa.shuffled_ids
