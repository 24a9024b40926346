"""Extractive question answering (SQuAD) with the Hugging Face Trainer.

    python train_qa.py --model_name_or_path bert-base-uncased --dataset_name squad \
        --do_train True --do_eval True --max_seq_length 384 --doc_stride 128 --output_dir /opt/ml/model

Data: `SM_CHANNEL_TRAIN` / `SM_CHANNEL_TEST` folders of flat-SQuAD JSON lines
(`id, title, context, question, answers{text[], answer_start[]}`), else `--dataset_name`.
Exit codes: 0 done, 143 interrupted (checkpoint saved), 2 bad input, 1 other.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import batches
import compat
import data_channels
import qa_postprocess
import record_checks
import script_arguments
import trainkit

_MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions")


def _model_columns(features: dict[str, list]) -> dict[str, list]:
    return {k: v for k, v in features.items() if k in _MODEL_COLUMNS}


def build_trainer_class(transformers: Any) -> type:
    class QATrainer(transformers.Trainer):
        """`evaluate` post-processes start/end logits into answer texts and scores them (EM, F1)."""

        def __init__(self, *args, eval_examples=None, eval_meta=None, script_args=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.eval_examples = eval_examples
            self.eval_meta = eval_meta
            self.script_args = script_args
            self.last_predictions: dict[str, str] = {}

        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
            dataloader = self.get_eval_dataloader(eval_dataset)
            start = time.time()
            output = self.evaluation_loop(
                dataloader,
                description="Evaluation",
                prediction_loss_only=False,
                ignore_keys=ignore_keys,
                metric_key_prefix=metric_key_prefix,
            )
            start_logits, end_logits = output.predictions[:2]
            self.last_predictions = qa_postprocess.postprocess_predictions(
                self.eval_examples,
                self.eval_meta["example_index"],
                self.eval_meta["offset_mapping"],
                start_logits,
                end_logits,
                n_best_size=self.script_args.n_best_size,
                max_answer_length=self.script_args.max_answer_length,
            )
            scores = qa_postprocess.squad_metrics(self.eval_examples, self.last_predictions)
            metrics = {f"{metric_key_prefix}_{k}": v for k, v in scores.items()}
            metrics.update({k: v for k, v in (output.metrics or {}).items() if isinstance(v, (int, float))})
            metrics[f"{metric_key_prefix}_runtime"] = round(time.time() - start, 4)
            self.log(metrics)
            self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
            return metrics

    return QATrainer


def run(argv: list[str]) -> int:
    script_args, training_args = script_arguments.parse_args(argv, prog="train_qa.py")
    if script_args.max_seq_length is None:
        script_args.max_seq_length = 384
    if script_args.doc_stride >= script_args.max_seq_length // 2:
        raise script_arguments.UsageError(
            f"--doc_stride {script_args.doc_stride} must be below half of --max_seq_length"
            f" {script_args.max_seq_length}"
        )
    need_eval = bool(training_args.do_eval or training_args.do_predict)
    train_records, eval_records = data_channels.load_splits(
        script_args, bool(training_args.do_train), need_eval, check=record_checks.qa_records
    )
    dirs = trainkit.prepare_dirs(script_args, training_args)
    trainkit.log_environment(training_args)

    import transformers

    tokenizer = trainkit.load_tokenizer(script_args)
    if not tokenizer.is_fast:
        raise script_arguments.UsageError("question answering needs a fast tokenizer (offset mappings)")

    def featurize(records: list[dict], keep_offsets: bool) -> dict[str, list]:
        return qa_postprocess.prepare_features(
            tokenizer,
            records,
            script_args.max_seq_length,
            script_args.doc_stride,
            script_args.pad_to_max_length,
            keep_offsets,
        )

    train_ds = eval_ds = None
    eval_meta: dict[str, list] = {}
    if train_records is not None:
        train_ds = batches.FeatureDataset(_model_columns(featurize(train_records, keep_offsets=False)))
    if eval_records is not None:
        feats = featurize(eval_records, keep_offsets=True)
        eval_meta = {"example_index": feats["example_index"], "offset_mapping": feats["offset_mapping"]}
        eval_ds = batches.FeatureDataset(_model_columns(feats))

    transformers.set_seed(training_args.seed)
    try:
        model = transformers.AutoModelForQuestionAnswering.from_pretrained(script_args.model_name_or_path)
    except OSError as exc:
        raise script_arguments.UsageError(f"cannot load model {script_args.model_name_or_path}: {exc}") from None

    fp = training_args.fp16 or training_args.bf16
    collator = batches.PadCollator(tokenizer.pad_token_id or 0, pad_to_multiple_of=8 if fp else None,
                                   with_ids=script_args.log_samples)
    MetricPrinter, GracefulStop = trainkit.make_callbacks(transformers)
    graceful = GracefulStop()
    trainer_class = trainkit.in_global_order(build_trainer_class(transformers), log_samples=script_args.log_samples)
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        callbacks=[MetricPrinter(), graceful],
        eval_examples=eval_records,
        eval_meta=eval_meta,
        script_args=script_args,
        **compat.trainer_tokenizer_kwargs(transformers.Trainer, tokenizer),
    )
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)

    def write_predictions(data_dir: Path) -> None:
        if training_args.do_predict and trainer.last_predictions:
            (data_dir / "predictions.json").write_text(json.dumps(trainer.last_predictions, indent=1) + "\n")

    return trainkit.train_and_finish(
        trainer,
        graceful,
        collator,
        script_args,
        training_args,
        dirs,
        evaluate=trainer.evaluate if eval_ds is not None else None,
        extra_outputs=write_predictions,
    )


if __name__ == "__main__":
    trainkit.main_guard(run, sys.argv[1:])
