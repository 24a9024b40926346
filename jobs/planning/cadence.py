"""How often a job logs its loss and evaluates, chosen from its length, so every job draws a loss curve.

transformers logs every 500 steps by default: a 100-step job (bert-squad) never prints a loss, a 500-step
one prints one. Unless the person set them, `logging_steps` gives at least LOSS_POINTS loss points and
`eval_steps` EVAL_POINTS evaluations over the run, on SageMaker and locally alike (the local backend
applies the same rule to its scaled-down step count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec

#: Loss points a run shows at least (when it has that many steps).
LOSS_POINTS = 20
#: Evaluations during a run (the scripts evaluate once more at the end).
EVAL_POINTS = 4
#: transformers' defaults, used when the person left them out.
DEFAULT_EPOCHS = 3.0
DEFAULT_BATCH_SIZE = 8

#: Training examples of the datasets trainbot knows by name (their `train` split), for runs given in epochs.
TRAIN_EXAMPLES = {
    "squad": 87599,
    "squad_v2": 130319,
    "imdb": 25000,
    "ag_news": 120000,
    "emotion": 16000,
    "yelp_polarity": 560000,
    "mnli": 392702,
    "sst2": 67349,
    "mrpc": 3668,
    "qnli": 104743,
    "qqp": 363846,
    "rte": 2490,
    "cola": 8551,
}
_CADENCE_KEYS = ("logging_steps", "eval_steps", "eval_strategy", "evaluation_strategy")


def total_steps(spec: JobSpec, hyperparameters: Mapping[str, object]) -> int | None:
    """Optimizer steps the run will take: `max_steps`, else epochs x steps per epoch for a known dataset;
    None when neither is known (own data given in epochs)."""
    max_steps = _number(hyperparameters.get("max_steps"))
    if max_steps is not None and max_steps > 0:
        return int(max_steps)
    examples = TRAIN_EXAMPLES.get(spec.dataset or "") if spec.train_data is None else None
    if examples is None:
        return None
    limit = _number(hyperparameters.get("max_train_samples"))
    if limit is not None and limit > 0:
        examples = min(examples, int(limit))
    batch = (_number(hyperparameters.get("per_device_train_batch_size")) or DEFAULT_BATCH_SIZE) * data_parallel_width(
        spec
    )
    batch *= _number(hyperparameters.get("gradient_accumulation_steps")) or 1
    epochs = _number(hyperparameters.get("num_train_epochs")) or DEFAULT_EPOCHS
    return max(1, math.ceil(math.ceil(examples / batch) * epochs))


def data_parallel_width(spec: JobSpec) -> int:
    """How many copies of the model share each batch: every GPU for data parallel and ddp, the model's
    replicas (processes / partitions) for model parallel, the instance's GPUs for one process."""
    gpus = max(1, spec.instance.gpus)
    if spec.distribution in ("data", "ddp", "fsdp"):
        return spec.instance_count * gpus
    if spec.distribution == "model":
        partitions = _number((spec.mp_parameters or {}).get("partitions")) or 1
        return max(1, spec.instance_count * (spec.processes_per_host or gpus) // int(partitions))
    return gpus


def cadence_for_steps(steps: int, *, evaluates: bool) -> dict[str, int | str]:
    """`logging_steps` (and `eval_steps` with `eval_strategy=steps` when the run evaluates) for `steps`."""
    cadence: dict[str, int | str] = {"logging_steps": max(1, steps // LOSS_POINTS)}
    if evaluates:
        cadence.update(eval_strategy="steps", eval_steps=max(1, math.ceil(steps / EVAL_POINTS)))
    return cadence


def chosen_cadence(
    given: Mapping[str, object], steps: int | None, *, evaluates: bool
) -> dict[str, int | str]:
    """The cadence keys to add for a run of `steps`, leaving out whatever the person set (`given`)."""
    if steps is None:
        return {}
    cadence = cadence_for_steps(steps, evaluates=evaluates)
    if "logging_steps" in given:
        cadence.pop("logging_steps")
    if any(key in given for key in _CADENCE_KEYS[1:]):
        for key in ("eval_strategy", "eval_steps"):
            cadence.pop(key, None)
    return cadence


def loss_points(steps: int, logging_steps: int) -> int:
    """Loss lines a run of `steps` prints at `logging_steps` (the scripts also log the last step)."""
    return steps // logging_steps + (1 if steps % logging_steps else 0)


def evaluates(hyperparameters: Mapping[str, object]) -> bool:
    """Whether the scripts will evaluate: do_eval, or neither do_train, do_eval nor do_predict given."""
    flags = [hyperparameters.get(k) for k in ("do_train", "do_eval", "do_predict")]
    if all(flag is None for flag in flags):
        return True
    return hyperparameters.get("do_eval") is True or str(hyperparameters.get("do_eval")).lower() == "true"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
