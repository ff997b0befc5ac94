"""How gepa 0.1.4 pads an epoch's last minibatch, and what that changes in the simulator.

gepa's EpochShuffledBatchSampler pads the shuffled trainset to a multiple of
b with the least frequent ids, ties broken by Counter.most_common's order
reversed: the shuffle's last id, then the one before it. The last chunk can
then hold one example twice. The simulator (sim/minibatches.py, EpochSampler) pads
so too since this study found it padding with the shuffle's first ids. This
prints gepa's own sampler on a trainset of 10 at b = 3, then the quality
workload of `pxn conformance --task quality` at trainset 10 simulated with
each padding, the earlier one patched in (1500 replicates, the same seeds;
mean and its standard error).

Run from the repository root: .venv/bin/python experiments/conformance/padding.py
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
from gepa.core.data_loader import ensure_loader
from gepa.strategies.batch_sampler import EpochShuffledBatchSampler

from pxn.checks.conformance import DEFAULT_QUALITY_SCENARIO, at_time_scale
from pxn.shape import Shape
from pxn.sim import minibatches
from pxn.sim.model import simulate_once

REPLICATES = 1500


def gepa_sampler_chunks() -> None:
    sampler = EpochShuffledBatchSampler(3, random.Random(0))
    loader = ensure_loader(list(range(10)))
    state = SimpleNamespace(i=0)
    chunks = []
    for i in range(4):
        state.i = i
        chunks.append(sampler.next_minibatch_ids(loader, state))
    print(f"gepa: shuffled and padded {sampler.shuffled_ids}; an epoch's minibatches {chunks}")


def first_ids_padded(self) -> list[int]:
    """EpochSampler.padded_order as the simulator had it: the shuffle's first ids."""
    size = self.trainset_size
    order = self.rng.permutation(size).tolist()
    return [order[p % size] for p in range(self.chunks * self.minibatch)]


def figures(scenario, shape: Shape) -> str:
    runs = [simulate_once(scenario, shape, r) for r in range(REPLICATES)]
    columns = {
        "acceptance": [r.accepted / r.proposals for r in runs],
        "skipped share": [r.skipped / (r.skipped + r.proposals) for r in runs],
        "iterations": [r.iterations for r in runs],
        "best score": [r.best_score for r in runs],
    }
    return ", ".join(
        f"{name} {np.mean(v):.3f} ({np.std(v) / np.sqrt(len(v)):.3f})"
        for name, v in columns.items()
    )


def main() -> None:
    gepa_sampler_chunks()
    scenario = at_time_scale(DEFAULT_QUALITY_SCENARIO.replace(trainset_size=10), 0.01)
    gepas = minibatches.EpochSampler.padded_order
    simulators = {"first ids": first_ids_padded, "gepa's": gepas}
    for shape in (Shape(1, 1), Shape(2, 2)):
        for padding, order in simulators.items():
            minibatches.EpochSampler.padded_order = order
            print(f"{shape.label:6} padded with {padding:9}: {figures(scenario, shape)}")
    minibatches.EpochSampler.padded_order = gepas


if __name__ == "__main__":
    main()
