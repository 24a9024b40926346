"""GlobalOrderSampler: every split of one global batch over processes trains the same examples at every step,
and the Trainer's skip on resume (steps done x accumulation per-process batches) lands where the last save
was. Pure Python: the sampler as 4.28's DataLoader (sharded here) and accelerate (dealt there) use it."""

from __future__ import annotations

import pytest
from batches import GlobalOrderSampler


def steps_of(size: int, per_process: int, accumulation: int, processes: int, *, dealt: bool,
             epoch: int = 0) -> list[list[int]]:
    """Each optimizer step's examples, over all processes, sorted."""
    per_rank: list[list[list[int]]] = []
    for rank in range(processes):
        sampler = GlobalOrderSampler(size, per_process, accumulation, processes, rank, seed=7)
        sampler.set_epoch(epoch)
        if dealt:  # accelerate's BatchSamplerShard: the whole order in per-process batches, batch i to i % P
            sampler.shard = False
            order = list(sampler)
            batches = [order[i : i + per_process] for i in range(0, len(order), per_process)]
            mine = batches[rank::processes]
        else:  # transformers 4.28: no dealer, the sampler yields this rank's own batches
            assert sampler.shard == (processes > 1)
            order = list(sampler)
            assert len(order) == len(sampler)
            mine = [order[i : i + per_process] for i in range(0, len(order), per_process)]
        per_rank.append(mine)
    counts = {len(mine) for mine in per_rank}
    assert len(counts) == 1  # every process has as many batches: no rank waits on a collective alone
    micro = counts.pop()
    assert micro % accumulation == 0
    return [sorted(i for mine in per_rank for batch in mine[s * accumulation : (s + 1) * accumulation] for i in batch)
            for s in range(micro // accumulation)]


@pytest.mark.parametrize("dealt", [False, True])
@pytest.mark.parametrize(("per_process", "accumulation", "processes"), [(16, 2, 1), (16, 1, 2), (8, 2, 2), (4, 1, 8)])
def test_any_split_of_the_global_batch_trains_the_same_examples_each_step(
    per_process: int, accumulation: int, processes: int, dealt: bool
) -> None:
    one = steps_of(200, 32, 1, 1, dealt=False)
    assert len(one) == 200 // 32 and all(len(step) == 32 for step in one)
    assert steps_of(200, per_process, accumulation, processes, dealt=dealt) == one
    later = steps_of(200, per_process, accumulation, processes, dealt=dealt, epoch=3)
    assert later == steps_of(200, 32, 1, 1, dealt=False, epoch=3) and later != one  # reshuffled each epoch


def test_the_trainers_skip_of_steps_times_accumulation_batches_lands_on_the_next_unseen_step() -> None:
    sampler = GlobalOrderSampler(200, 8, 2, 2, rank=1, seed=7)
    batches = [b for b in zip(*[iter(list(sampler))] * 8, strict=False)]
    done = 2  # global steps of this epoch already trained (the checkpoint's step)
    resumed = [i for batch in batches[done * 2 : done * 2 + 2] for i in batch]
    order = GlobalOrderSampler(200, 32, 1, 1, rank=0, seed=7).epoch_order()
    assert set(resumed) <= set(order[done * 32 : (done + 1) * 32])


def test_a_dataset_smaller_than_a_global_batch_fills_one_step() -> None:
    [step] = steps_of(10, 8, 1, 2, dealt=False)
    assert len(step) == 16 and set(step) == set(range(10))
