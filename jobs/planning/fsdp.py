"""distribution=fsdp: torchrun on every GPU of every instance (the SDK's ``torch_distributed``) and the Trainer's
FSDP settings, written as the bot's scripts' arguments: every parameter, gradient and optimizer state sharded
(``full_shard``), each decoder layer its own unit (``auto_wrap``: the scripts name the model's decoder layer
class, from its ``_no_split_modules``), and activations recomputed in the backward pass (FSDP's activation
checkpointing, which replaces the Trainer's ``gradient_checkpointing``: the Trainer refuses both at once).

A team's own script gets none of these (it takes its own arguments): it runs under torchrun, and shards itself.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec

FSDP_OPTIONS = "full_shard auto_wrap"
FSDP_KEYS = ("fsdp", "fsdp_config")


def fsdp_config(spec: JobSpec) -> dict[str, object]:
    """The Trainer's ``fsdp_config``: activation checkpointing on; a typed ``hp.fsdp_config`` wins."""
    typed = spec.hyperparameters.get("fsdp_config")
    if isinstance(typed, str) and typed.strip().startswith("{"):
        try:
            found = json.loads(typed)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return {"activation_checkpointing": True, **found}
    return {"activation_checkpointing": True}


def fsdp_hyperparameters(spec: JobSpec) -> dict[str, str | bool]:
    """The bot's scripts' FSDP arguments (JSON text for ``fsdp_config``: the toolkit passes strings)."""
    return {
        "fsdp": str(spec.hyperparameters.get("fsdp") or FSDP_OPTIONS),
        "fsdp_config": json.dumps(fsdp_config(spec), sort_keys=True),
        "gradient_checkpointing": False,
    }


def words(spec: JobSpec) -> str:
    """How the plan says what FSDP does for this job."""
    if spec.own_code:
        return "torchrun on every GPU of every instance; your script shards the model itself"
    return ("torchrun on every GPU of every instance; FSDP full shard, each decoder layer wrapped, activation "
            "checkpointing")
