"""Supervised fine-tuning of a causal language model on chat data with TRL's SFTTrainer: a PEFT LoRA adapter
(the default), or every weight (``--use_lora False``, e.g. sharded with FSDP).

    python train_sft.py --model_name_or_path Qwen/Qwen2.5-7B-Instruct --dataset_name trl-lib/Capybara \
        --bf16 True --gradient_checkpointing True --lora_r 16 --max_steps 500

Data: `SM_CHANNEL_TRAIN` / `SM_CHANNEL_TEST` folders of JSON lines, each a chat: ``{"messages": [{"role":
"user", "content": ...}, {"role": "assistant", "content": ...}]}`` (the model's chat template renders them), else
--dataset_name (its train and test splits). Checkpoints hold the adapter (or the weights) and the optimizer
state, saved on steps and on the clock, and a relaunch resumes from the newest. The model folder holds the base
model with the adapter merged in (what a text-generation server loads) and the adapter alone in ``adapter/``.
Reports loss, eval loss and tokens per second. Runs on the images that ship TRL and PEFT (transformers 5.x).
Exit codes: 0 done, 143 interrupted (checkpoint saved), 2 bad input, 1 other.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import compat
import data_channels
import record_checks
import script_arguments
import trainkit

#: The SFT script's defaults on top of the scripts' own; SFTConfig decides which columns the collator gets.
SFT_DEFAULTS = {key: value for key, value in script_arguments.DEFAULTS.items() if key != "remove_unused_columns"}
DEFAULT_MAX_LENGTH = 1024
ADAPTER_FOLDER = "adapter"
_EVAL_SPLITS = ("test", "validation")


def parse(argv: list[str]) -> tuple[Any, Any, Any]:
    """(ScriptArguments, SftArguments, TRL's SFTConfig)."""
    from trl import SFTConfig

    script_args, sft_args, config = script_arguments.parse_all(
        argv, "train_sft.py", (script_arguments.ScriptArguments, script_arguments.SftArguments, SFTConfig), SFT_DEFAULTS
    )
    compat.set_field(config, "max_length", script_args.max_seq_length or DEFAULT_MAX_LENGTH)
    return script_args, sft_args, config


def chat_dataset(records: list[dict] | None) -> Any:
    """The chats as a ``datasets.Dataset`` with the one column SFTTrainer renders (its other keys dropped)."""
    if records is None:
        return None
    import datasets

    return datasets.Dataset.from_list([{"messages": record["messages"]} for record in records])


def load_model(name: str, config: Any) -> Any:
    import torch
    import transformers

    dtype = torch.bfloat16 if config.bf16 else None
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(name, **compat.dtype_kwargs(dtype))
    except OSError as exc:
        raise script_arguments.UsageError(f"cannot load model {name}: {exc}") from None


def wrap_decoder_layers(model: Any, config: Any) -> None:
    """Under FSDP, auto-wrap the model's decoder layer class (``_no_split_modules``), said in the log."""
    fsdp_config = getattr(config, "fsdp_config", None)
    if not getattr(config, "fsdp", None) or not isinstance(fsdp_config, dict):
        return
    layers = fsdp_config.get("transformer_layer_cls_to_wrap") or list(getattr(model, "_no_split_modules", None) or [])
    if not layers:
        raise script_arguments.UsageError(
            f"FSDP cannot tell the decoder layer class of {type(model).__name__}: pass it in fsdp_config"
        )
    fsdp_config["transformer_layer_cls_to_wrap"] = layers
    # The arguments' FSDP plugin settings were derived when they were parsed: derive them again with the class.
    if hasattr(config, "_process_fsdp_args"):
        compat.set_field(config, "fsdp_plugin_args", config._process_fsdp_args())
    if config.process_index == 0:
        options = " ".join(str(getattr(option, "value", option)) for option in config.fsdp)
        print(f"[fsdp] {options}; wrapping {', '.join(layers)}; activation checkpointing "
              f"{'on' if fsdp_config.get('activation_checkpointing') else 'off'}", file=sys.stderr, flush=True)


def lora_config(sft_args: Any) -> Any:
    if not sft_args.use_lora:
        return None
    from peft import LoraConfig

    modules = sft_args.lora_target_modules
    targets = modules if modules == "all-linear" else [m.strip() for m in modules.split(",") if m.strip()]
    return LoraConfig(r=sft_args.lora_r, lora_alpha=sft_args.lora_alpha, lora_dropout=sft_args.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")


def counting_tokens(trainer_class: type) -> type:
    """``trainer_class`` counting the tokens it trains (every process's, added up at the end)."""

    class TokenCountingTrainer(trainer_class):  # type: ignore[misc, valid-type]
        trained_tokens = 0

        def training_step(self, model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
            mask = inputs.get("attention_mask")
            ids = inputs.get("input_ids")
            self.trained_tokens += int(mask.sum()) if mask is not None else int(ids.numel()) if ids is not None else 0
            return super().training_step(model, inputs, *args, **kwargs)

        def tokens_per_second(self, metrics: dict[str, Any]) -> dict[str, float]:
            runtime = float(metrics.get("train_runtime") or 0.0)
            total = _sum_over_processes(self.trained_tokens)
            return {"train_tokens_per_second": total / runtime} if runtime > 0 and total else {}

    TokenCountingTrainer.__name__ = trainer_class.__name__
    return TokenCountingTrainer


def _sum_over_processes(count: int) -> int:
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return count
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    total = torch.tensor([count], dtype=torch.long, device=device)
    dist.all_reduce(total)
    return int(total.item())


def final_model_saver(trainer: Any, sft_args: Any) -> Any:
    """Writes the model folder: a full fine-tune as the Trainer saves it (FSDP gathers it); a LoRA run's adapter
    into adapter/ and, with merge_adapter, the base with the adapter merged in beside it."""

    def save(model_dir: Path) -> None:
        if not sft_args.use_lora:
            trainer.save_model(str(model_dir))
            return
        if not trainer.is_world_process_zero():
            return
        trainer.model.save_pretrained(str(model_dir / ADAPTER_FOLDER))
        if sft_args.merge_adapter:
            merged = trainer.model.merge_and_unload()
            merged.save_pretrained(str(model_dir))
            print(f"[model] the adapter is merged into the base model in {model_dir}; the adapter alone is in "
                  f"{ADAPTER_FOLDER}/", file=sys.stderr, flush=True)

    return save


def run(argv: list[str]) -> int:
    script_args, sft_args, config = parse(argv)
    if not config.do_train:  # TRL's trainer reads its first training example to set itself up
        raise script_arguments.UsageError("train_sft.py trains: --do_train is needed (evaluation alone is not offered)")
    train_records, eval_records = data_channels.load_splits(
        script_args, bool(config.do_train), bool(config.do_eval), eval_splits=_EVAL_SPLITS,
        check=record_checks.chat_records,
    )
    dirs = trainkit.prepare_dirs(script_args, config)
    trainkit.log_environment(config)

    import datasets
    import transformers
    import trl

    datasets.disable_progress_bars()  # the log is read by people and by the metric scanner: no bars in it
    transformers.utils.logging.disable_progress_bar()
    tokenizer = trainkit.load_tokenizer(script_args)
    if not getattr(tokenizer, "chat_template", None):
        raise script_arguments.UsageError(
            f"the tokenizer of {script_args.tokenizer_name or script_args.model_name_or_path} has no chat template "
            "to render the messages with: fine-tune an instruct or chat model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    transformers.set_seed(config.seed)
    model = load_model(script_args.model_name_or_path, config)
    wrap_decoder_layers(model, config)

    MetricPrinter, GracefulStop = trainkit.make_callbacks(transformers)
    graceful = GracefulStop()
    trainer_class = trainkit.in_global_order(counting_tokens(trl.SFTTrainer))
    trainer = trainer_class(
        model=model,
        args=config,
        train_dataset=chat_dataset(train_records),
        eval_dataset=chat_dataset(eval_records),
        processing_class=tokenizer,
        peft_config=lora_config(sft_args),
        callbacks=[MetricPrinter(), graceful],
    )
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    return trainkit.train_and_finish(
        trainer, graceful, None, script_args, config, dirs,
        evaluate=trainer.evaluate if eval_records is not None else None,
        save=final_model_saver(trainer, sft_args),
        trained_metrics=trainer.tokens_per_second,
    )


if __name__ == "__main__":
    trainkit.main_guard(run, sys.argv[1:])
