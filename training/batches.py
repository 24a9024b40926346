"""Tokenized features as a map-style dataset, the collator that pads them into batches, and the sampler
that orders them the same way whatever the number of processes.

Why a sampler of our own: the Trainer's (a RandomSampler in one process, a DistributedSampler or
accelerate's sharding in several) shuffles differently for every process count, so a run relaunched on
another number of GPUs would resume somewhere in the data the first attempt never saw. `GlobalOrderSampler`
cuts one seeded order per epoch into global batches (per-process batch x accumulation x processes): step t
trains examples [t x G, (t + 1) x G) of that order under any split of G, and the Trainer's own skip on
resume (steps done x accumulation per-process batches) lands on exactly the global samples already seen.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

#: The batch key that carries the examples' ids to the trainer when a run logs them (never to the model).
SAMPLE_IDS = "trainbot_sample_ids"


class FeatureDataset:
    """A map-style dataset over columns of equal length (lists of ints or of int sequences)."""

    def __init__(self, columns: dict[str, list]):
        self.columns = columns
        self._len = len(next(iter(columns.values())))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = {k: v[i] for k, v in self.columns.items()}
        item["feature_idx"] = i
        return item


class PadCollator:
    """Pads token columns to the longest in the batch (or a multiple of 8), stacks scalar columns.

    Remembers the first feature indices it saw, so a run can report which shard each rank trained on.
    """

    _PAD_ZERO = ("attention_mask", "token_type_ids", "special_tokens_mask")

    def __init__(
        self, pad_token_id: int, pad_to_multiple_of: int | None = None, remember: int = 32, with_ids: bool = False
    ):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.remember = remember
        self.with_ids = with_ids  # put the examples' ids into the batch (SAMPLE_IDS), for --log_samples
        self.seen: list[int] = []

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        import numpy as np
        import torch

        ids = [f["feature_idx"] for f in features]
        if len(self.seen) < self.remember:
            self.seen.extend(ids[: self.remember - len(self.seen)])
        batch: dict[str, Any] = {}
        for key in features[0]:
            if key == "feature_idx":
                continue
            values = [f[key] for f in features]
            if isinstance(values[0], (int, np.integer)):
                batch[key] = torch.tensor(values, dtype=torch.long)
                continue
            width = max(len(v) for v in values)
            if self.pad_to_multiple_of:
                width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
            pad = 0 if key in self._PAD_ZERO else self.pad_token_id
            out = np.full((len(values), width), pad, dtype=np.int64)
            for row, v in enumerate(values):
                out[row, : len(v)] = v
            batch[key] = torch.from_numpy(out)
        if self.with_ids:
            batch[SAMPLE_IDS] = torch.tensor(ids, dtype=torch.long)
        return batch


class GlobalOrderSampler:
    """One order of the examples per epoch, the same for any number of processes (see the module docstring).

    Each epoch is a permutation seeded by ``seed + epoch``, cut into whole global batches; the examples past
    the last whole one (fewer than a global batch) sit that epoch out, so every process count trains the
    same examples at every step (a dataset smaller than one global batch is repeated to fill it). With
    ``shard`` this process takes its own per-process batches (batch i goes to process i mod processes, as
    accelerate deals them); without it, the whole order is yielded for accelerate's sharding to deal."""

    def __init__(self, size: int, per_process: int, accumulation: int, processes: int, rank: int, seed: int):
        self.size = size
        self.per_process = max(1, per_process)
        self.processes = max(1, processes)
        self.rank = rank
        self.seed = seed
        self.global_batch = self.per_process * max(1, accumulation) * self.processes
        self.epoch = 0
        self.shard = self.processes > 1

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.size // self.global_batch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_order(self) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed + self.epoch).shuffle(order)
        needed = self.steps_per_epoch * self.global_batch
        while 0 < len(order) < needed:
            order += order[: needed - len(order)]
        return order[:needed]

    def __iter__(self) -> Iterator[int]:
        order = self.epoch_order()
        if not self.shard:
            yield from order
            return
        size = self.per_process
        for start in range(self.rank * size, len(order), self.processes * size):
            yield from order[start : start + size]

    def __len__(self) -> int:
        whole = self.steps_per_epoch * self.global_batch
        return whole // self.processes if self.shard else whole
