"""The three recipes of the AWS/Hugging Face distributed fine-tuning article, with their exact values.

Each preset is the raw field dict a JobSpec is built from; keys typed after the preset override it.
The values are the notebooks'. What still differs from them, for every preset, and why:
- the containers: transformers 4.28.1 / PyTorch 2.0.0 / py310 instead of the notebooks' 4.6.1 / 1.7.1 /
  py36 (retired images; 4.28.1 is the newest that still has smdistributed data parallel, versions.py);
- the scripts: trainbot's own `train_qa.py` / `train_classification.py` instead of the notebooks'
  `run_qa.py` / `run_glue.py` from a transformers git checkout and the spot notebook's `train.py` (the
  same Trainer arguments; ours also read SageMaker channels, resume from checkpoints and print metrics);
- `output_dir=/opt/ml/model` is not passed: the scripts save the final model to SM_MODEL_DIR themselves;
- cadence: `logging_steps` / `eval_steps` are added for the job's length (cadence.py), or bert-squad's 100
  steps would print no loss at transformers' default of 500.
"""

from __future__ import annotations

import copy
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # Data parallel: BERT large on SQuAD, 2 x ml.p3.16xlarge, smdistributed dataparallel.
    "bert-squad": {
        "task": "question-answering",
        "model": "bert-large-uncased-whole-word-masking",
        "dataset": "squad",
        "instance_type": "ml.p3.16xlarge",
        "instance_count": 2,
        "distribution": "data",
        "volume_size": 200,  # the notebook's
        "hyperparameters": {
            "do_train": True,
            "do_eval": True,
            "fp16": True,
            "per_device_train_batch_size": 4,
            "per_device_eval_batch_size": 4,
            "num_train_epochs": 2,
            "max_seq_length": 384,
            "max_steps": 100,
            "pad_to_max_length": True,
            "doc_stride": 128,
        },
    },
    # Model parallel: RoBERTa large on GLUE MNLI, smdistributed modelparallel over MPI, one instance as in
    # the notebook; the plan turns the debugger off for model parallel (`debugger_hook_config=False`).
    "roberta-mnli": {
        "task": "text-classification",
        "model": "roberta-large",
        "dataset": "mnli",
        "instance_type": "ml.p3.16xlarge",
        "instance_count": 1,
        "distribution": "model",
        "volume_size": 200,  # the notebook's
        "processes_per_host": 8,
        "mp_parameters": {
            "microbatches": 4,
            "placement_strategy": "spread",
            "pipeline": "interleaved",
            "optimize": "speed",
            "partitions": 4,
            "ddp": True,
        },
        "hyperparameters": {
            "per_device_train_batch_size": 16,
            "per_device_eval_batch_size": 16,
            "do_train": True,
            "do_eval": True,
            "do_predict": True,
            "num_train_epochs": 2,
            "max_steps": 500,
        },
    },
    # Managed spot: DistilBERT on IMDB-style reviews, one ml.p3.2xlarge, checkpoints to S3. The notebook's
    # `epochs` / `train_batch_size` are its own script's names for these Trainer arguments; its disk is
    # SageMaker's default, which plan.volume_size_gb keeps for a model this size; checkpoint_minutes=10
    # (the spot default) is trainbot's addition: the image's toolkit never passes SIGTERM on to the script.
    "distilbert-spot": {
        "task": "text-classification",
        "model": "distilbert-base-uncased",
        "dataset": "imdb",
        "instance_type": "ml.p3.2xlarge",
        "instance_count": 1,
        "distribution": "none",
        "spot": True,
        "max_run": 1000,
        "max_wait": 3600,
        "hyperparameters": {
            "num_train_epochs": 1,
            "per_device_train_batch_size": 32,
        },
    },
}

DESCRIPTIONS: dict[str, str] = {
    "bert-squad": "data parallel: bert-large-uncased-whole-word-masking on SQuAD, 2 x ml.p3.16xlarge",
    "roberta-mnli": "model parallel: roberta-large on GLUE MNLI, 1 x ml.p3.16xlarge, 8 processes a host",
    "distilbert-spot": "managed spot: distilbert-base-uncased on IMDB, 1 x ml.p3.2xlarge, max_run 1000 s, max_wait 3600 s",
}

#: The model-parallel parameters a ``distribution=model`` job gets unless it says otherwise.
DEFAULT_MP_PARAMETERS: dict[str, Any] = dict(PRESETS["roberta-mnli"]["mp_parameters"])
DEFAULT_PROCESSES_PER_HOST = 8


def preset_names() -> list[str]:
    return list(PRESETS)


def preset_fields(name: str) -> dict[str, Any]:
    """A deep copy of the preset's fields, with ``preset`` set, safe to modify."""
    fields = copy.deepcopy(PRESETS[name])
    fields["preset"] = name
    return fields
