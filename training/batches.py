"""Tokenized features as a map-style dataset, and the collator that pads them into batches."""

from __future__ import annotations

from typing import Any


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

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None, remember: int = 32):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.remember = remember
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
        return batch
