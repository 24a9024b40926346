"""Sentence and sentence-pair classification (GLUE MNLI, IMDB, ...) with the Hugging Face Trainer.

    python train_classification.py --model_name_or_path roberta-large --dataset_name glue \
        --dataset_config_name mnli --do_train True --do_eval True --output_dir /opt/ml/model

Data: `SM_CHANNEL_TRAIN` / `SM_CHANNEL_TEST` folders of JSON lines, either pairs
(`premise, hypothesis, label`; also `sentence1, sentence2` or `question, sentence`) or single texts
(`text, label` or `sentence, label`), else `--dataset_name`. Reports accuracy, and F1 for two classes.
Labels are class numbers or names; names (strings in the data, or a hub dataset's ClassLabel names) go
into the model's config as id2label / label2id, so an endpoint answers with them.
Exit codes: 0 done, 143 interrupted (checkpoint saved), 2 bad input, 1 other.
"""

from __future__ import annotations

import sys
from typing import Any

import batches
import compat
import data_channels
import numpy as np
import record_checks
import script_arguments
import trainkit

_EVAL_SPLITS = ("validation_matched", "validation", "test")


def label_names(splits: list[list[dict] | None], known: list[str]) -> list[str]:
    """The class names in id order: a ClassLabel's names (`known`), then any other string labels of the
    data, sorted; empty when the labels are plain numbers without names."""
    found: set[str] = set()
    for records in splits:
        for record in records or ():
            value = record.get("label")
            if isinstance(value, str) and record_checks.whole_number(value) is None:
                found.add(value)
    if not found:
        return list(known)
    if any(record_checks.whole_number(r.get("label")) is not None for records in splits for r in records or ()):
        raise script_arguments.UsageError("labels mix names and numbers; use one or the other")
    return [name for name in known if name in found] + sorted(found - set(known))


def _label_id(value: Any, ids: dict[str, int]) -> int:
    if isinstance(value, str) and value in ids:
        return ids[value]
    number = record_checks.whole_number(value if value is not None else -1)
    return -1 if number is None else number


def tokenize(
    tokenizer: Any, records: list[dict], max_len: int, pad: bool, ids: dict[str, int] | None = None
) -> dict[str, list]:
    """Model inputs of records that passed `record_checks.classification_records`."""
    columns = record_checks.text_columns(records[0])
    if columns is None:  # not after load_splits' check; said without the record's keys, which are data too
        raise script_arguments.UsageError("cannot tell the text columns of the data")
    first, second = columns
    ids = ids or {}
    records = [r for r in records if _label_id(r.get("label"), ids) >= 0]  # GLUE test splits carry -1
    if not records:
        raise script_arguments.UsageError("no labelled records (every label is missing or -1)")
    columns: dict[str, list] = {}
    for lo in range(0, len(records), 1000):
        batch = records[lo : lo + 1000]
        enc = tokenizer(
            [r[first] for r in batch],
            [r[second] for r in batch] if second else None,
            truncation=True,
            max_length=max_len,
            padding="max_length" if pad else False,
        )
        for key, values in enc.items():
            columns.setdefault(key, []).extend(np.asarray(v, dtype=np.int32) for v in values)
        columns.setdefault("labels", []).extend(_label_id(r.get("label"), ids) for r in batch)
    return columns


def compute_metrics(eval_pred: Any) -> dict[str, float]:
    logits, labels = eval_pred[:2] if isinstance(eval_pred, tuple) else (eval_pred.predictions, eval_pred.label_ids)
    if isinstance(logits, tuple):
        logits = logits[0]
    preds = np.argmax(logits, axis=-1)
    labels = np.asarray(labels)
    metrics = {"accuracy": float((preds == labels).mean())}
    if logits.shape[-1] == 2:
        tp = float(((preds == 1) & (labels == 1)).sum())
        fp = float(((preds == 1) & (labels == 0)).sum())
        fn = float(((preds == 0) & (labels == 1)).sum())
        metrics["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return metrics


def run(argv: list[str]) -> int:
    script_args, training_args = script_arguments.parse_args(argv, prog="train_classification.py")
    if script_args.max_seq_length is None:
        script_args.max_seq_length = 128
    hub_names: list[str] = []
    train_records, eval_records = data_channels.load_splits(
        script_args, bool(training_args.do_train), bool(training_args.do_eval or training_args.do_predict),
        eval_splits=_EVAL_SPLITS, check=record_checks.classification_records, label_names_out=hub_names,
    )
    names = label_names([train_records, eval_records], hub_names)
    ids = {name: i for i, name in enumerate(names)}
    dirs = trainkit.prepare_dirs(script_args, training_args)
    trainkit.log_environment(training_args)

    import transformers

    tokenizer = trainkit.load_tokenizer(script_args)
    max_len = min(script_args.max_seq_length, tokenizer.model_max_length)
    train_ds = eval_ds = None
    labels_seen: set[int] = set()
    if train_records is not None:
        cols = tokenize(tokenizer, train_records, max_len, script_args.pad_to_max_length, ids)
        labels_seen.update(cols["labels"])
        train_ds = batches.FeatureDataset(cols)
    if eval_records is not None:
        cols = tokenize(tokenizer, eval_records, max_len, script_args.pad_to_max_length, ids)
        labels_seen.update(cols["labels"])
        eval_ds = batches.FeatureDataset(cols)
    num_labels = script_args.num_labels or max(max(labels_seen) + 1, len(names), 2)
    if max(labels_seen) >= num_labels or len(names) > num_labels:
        raise script_arguments.UsageError(
            f"the data has {max(max(labels_seen) + 1, len(names))} classes but --num_labels is {num_labels}")
    named = {}
    if names and len(names) == num_labels:  # the config carries the names: endpoints answer with them
        named = {"id2label": dict(enumerate(names)), "label2id": dict(ids)}

    transformers.set_seed(training_args.seed)
    try:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            script_args.model_name_or_path, num_labels=num_labels, **named
        )
    except OSError as exc:
        raise script_arguments.UsageError(f"cannot load model {script_args.model_name_or_path}: {exc}") from None

    fp = training_args.fp16 or training_args.bf16
    collator = batches.PadCollator(tokenizer.pad_token_id or 0, pad_to_multiple_of=8 if fp else None,
                                   with_ids=script_args.log_samples)
    MetricPrinter, GracefulStop = trainkit.make_callbacks(transformers)
    graceful = GracefulStop()
    trainer = trainkit.in_global_order(transformers.Trainer, log_samples=script_args.log_samples)(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        compute_metrics=compute_metrics,
        callbacks=[MetricPrinter(), graceful],
        **compat.trainer_tokenizer_kwargs(transformers.Trainer, tokenizer),
    )
    trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
    return trainkit.train_and_finish(
        trainer,
        graceful,
        collator,
        script_args,
        training_args,
        dirs,
        evaluate=trainer.evaluate if eval_ds is not None else None,
    )


if __name__ == "__main__":
    trainkit.main_guard(run, sys.argv[1:])
