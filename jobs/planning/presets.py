"""The three recipes of the AWS/Hugging Face distributed fine-tuning article, with their exact values.

Each preset is the raw field dict a JobSpec is built from; keys typed after the preset override it.
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
    # Model parallel: RoBERTa large on GLUE MNLI, smdistributed modelparallel over MPI.
    "roberta-mnli": {
        "task": "text-classification",
        "model": "roberta-large",
        "dataset": "mnli",
        "instance_type": "ml.p3.16xlarge",
        "instance_count": 2,
        "distribution": "model",
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
    # Managed spot: DistilBERT on IMDB-style reviews, one ml.p3.2xlarge, checkpoints to S3.
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
    "roberta-mnli": "model parallel: roberta-large on GLUE MNLI, 2 x ml.p3.16xlarge, 8 processes a host",
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
