"""The ranks of a distributed run: one flag they act on together, and leaving the group before exit.
Shipped beside the bot's scripts and beside a team's own script on spot (the spot entry uses it too).
Standard library and torch only: it runs inside the job.
"""

from __future__ import annotations

import sys
from typing import Any


class RankAgreement:
    """A flag every rank acts on together: a MAX all-reduce over a gloo group, so a rank that raised it
    carries the others. A save or a stop decided by one rank alone would leave it in the save's logging
    gather while the others enter the next step's collectives: a mismatch that hangs or kills the run.
    One process, or no torch.distributed: the flag as it is."""

    #: One gloo group for every agreement of the process (a new group is itself a collective).
    _shared_group: Any = None

    def __init__(self) -> None:
        self._distributed = False
        self._group: Any = None

    def join(self) -> None:
        """At train begin, once the Trainer has set up torch.distributed (every rank calls it)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return
        self._distributed = True
        if dist.get_backend() == "gloo":
            return  # the default group
        if RankAgreement._shared_group is None:
            try:
                RankAgreement._shared_group = dist.new_group(backend="gloo")
            except Exception:  # noqa: BLE001 - fall back to the default group
                return
        self._group = RankAgreement._shared_group

    def any_rank(self, flag: bool) -> bool:
        """True when `flag` is true on any rank; every rank must call it at the same step."""
        if not self._distributed:
            return flag
        import torch
        import torch.distributed as dist

        try:
            tensor = torch.tensor([1 if flag else 0], dtype=torch.int32)
            if self._group is None and dist.get_backend() != "gloo":
                tensor = tensor.cuda()
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._group)
            return bool(tensor.item())
        except Exception:  # noqa: BLE001 - e.g. smdistributed model parallel: decide locally
            return flag


def leave_process_group() -> bool:
    """Leave torch.distributed before the interpreter exits; True when there was a group to leave. A group
    left to the shutdown can abort a rank after training succeeded (gloo: "terminate called without an
    active exception", SIGABRT), and torchrun then fails the whole job."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:  # the run never imported torch: nothing to leave
        return False
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
            return True
    except Exception:  # noqa: BLE001 - leaving is best effort: the exit code is already decided
        return True
    return False
