"""gepa 0.1.4's minibatches (EpochShuffledBatchSampler): which chunk of the padded trainset
each proposal's minibatch is, and which examples a chunk holds in an epoch.

The trainset ids are padded to a multiple of b with repeated ids, so an epoch
has ceil(trainset / b) chunks of b; task j of iteration i (gepa's state.i =
i - 1) gets chunk (i - 1 + j) mod chunks, all from the same epoch's shuffle.
Two tasks share a minibatch only when their chunks coincide, which needs k >
chunks (the chunks wrap within the iteration). Under the quality model each
epoch has its own shuffle (examples differ in difficulty); under acceptance
rates a chunk's positions stand for its examples.
"""

from __future__ import annotations

import math

import numpy as np


class EpochSampler:
    """Which chunk of the padded trainset each task's minibatch is, and its examples."""

    def __init__(self, trainset_size: int, minibatch: int, rng: np.random.Generator | None = None):
        """`rng`: each epoch's shuffle is drawn from it; None: positions stand for examples."""
        self.trainset_size = trainset_size
        self.minibatch = minibatch
        self.chunks = math.ceil(trainset_size / minibatch)
        self.rng = rng
        self.tables: dict[int, list[list[int]]] = {}  # epoch -> each chunk's example ids

    def chunk(self, iteration: int, task: int) -> int:
        return (iteration - 1 + task) % self.chunks

    def epoch(self, iteration: int) -> int:
        return (iteration - 1) * self.minibatch // (self.chunks * self.minibatch)

    def ids(self, iteration: int, chunks: list[int]) -> list[list[int]]:
        """The example ids of each chunk in this iteration's epoch, a row each."""
        epoch = 0 if self.rng is None else self.epoch(iteration)
        table = self.tables.get(epoch)
        if table is None:
            b = self.minibatch
            padded = self.padded_order()
            table = [padded[c * b : c * b + b] for c in range(self.chunks)]
            self.tables[epoch] = table
        return [table[chunk] for chunk in chunks]

    def padded_order(self) -> list[int]:
        """An epoch's ids, padded to whole chunks. gepa pads with the least frequent ids,
        ties to the latest in its shuffle (Counter.most_common reversed): the shuffle's last
        ids, last first, so the last minibatch may hold one twice. Without a shuffle the
        positions repeat from the start (ids stand for positions there)."""
        size, pad = self.trainset_size, self.chunks * self.minibatch - self.trainset_size
        if self.rng is None:
            return [p % size for p in range(size + pad)]
        order = self.rng.permutation(size).tolist()
        return order + [order[-1 - j] for j in range(pad)]

    def examples(self, iteration: int, chunk: int) -> list[str]:
        """The chunk's example names, as the trace gives them."""
        return [f"train:{i}" for i in self.ids(iteration, [chunk])[0]]
