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

Two more are not the article's but what teams fine-tune today (trainbot's `train_sft.py`, TRL's SFTTrainer, on
the newest Hugging Face image, which ships TRL and PEFT; its versions are filled in by the spec):
- `llm-lora`: a LoRA adapter on Qwen2.5-7B-Instruct (Apache-2.0) over the Capybara chat data (Apache-2.0), bf16
  with gradient checkpointing, on one L40S (ml.g6e.2xlarge: 48 GB holds the bf16 weights, 15 GB, and the
  activations; 64 GB of host memory merges the adapter at the end), managed spot with saves on the clock;
- `llm-fsdp`: the same model fully fine-tuned, sharded with FSDP over 2 x 8 H100 (ml.p5.48xlarge).
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

#: The LLM presets' model and data: permissively licensed, not gated (a gated model needs TRAINBOT_HF_TOKEN_SECRET_ARN).
LLM_MODEL = "Qwen/Qwen2.5-7B-Instruct"
LLM_DATASET = "capybara"

PRESETS.update({
    "llm-lora": {
        "task": "text-generation",
        "model": LLM_MODEL,
        "dataset": LLM_DATASET,
        "instance_type": "ml.g6e.2xlarge",
        "instance_count": 1,
        "distribution": "none",
        "spot": True,
        "max_run": 4 * 3600,
        "max_wait": 8 * 3600,
        "volume_size": 100,  # the base model twice (downloaded, merged) and the checkpoints
        "hyperparameters": {
            "bf16": True,
            "gradient_checkpointing": True,
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 4,
            "learning_rate": 2e-4,
            "num_train_epochs": 1,
            "max_steps": 500,
            "max_seq_length": 1024,
            "lora_r": 16,
            "lora_alpha": 32,
            "lora_dropout": 0.05,
        },
    },
    "llm-fsdp": {
        "task": "text-generation",
        "model": LLM_MODEL,
        "dataset": LLM_DATASET,
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
        "distribution": "fsdp",
        "volume_size": 300,  # full checkpoints with optimizer state (~16 bytes a parameter, gathered)
        "hyperparameters": {
            "bf16": True,
            "use_lora": False,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 2,
            "learning_rate": 1e-5,
            "num_train_epochs": 1,
            "max_steps": 300,
            "max_seq_length": 2048,
        },
    },
})

DESCRIPTIONS: dict[str, str] = {
    "bert-squad": "data parallel: bert-large-uncased-whole-word-masking on SQuAD, 2 x ml.p3.16xlarge",
    "roberta-mnli": "model parallel: roberta-large on GLUE MNLI, 1 x ml.p3.16xlarge, 8 processes a host",
    "distilbert-spot": "managed spot: distilbert-base-uncased on IMDB, 1 x ml.p3.2xlarge, max_run 1000 s, max_wait 3600 s",
    "llm-lora": f"LoRA fine-tune (TRL SFT, bf16, spot): {LLM_MODEL} on Capybara chats, 1 x ml.g6e.2xlarge (L40S)",
    "llm-fsdp": f"full fine-tune with FSDP: {LLM_MODEL} on Capybara chats, 2 x ml.p5.48xlarge (16 x H100)",
}
#: The article's presets (the others are today's).
ARTICLE_PRESETS = ("bert-squad", "roberta-mnli", "distilbert-spot")

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
