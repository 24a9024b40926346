"""Training and evaluation records: the SageMaker `SM_CHANNEL_*` folders of JSON files, else
`datasets.load_dataset(--dataset_name)`."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from script_arguments import ScriptArguments, UsageError


def _channel(*names: str) -> Path | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            path = Path(value)
            if not path.is_dir():
                raise UsageError(f"data channel {name}={value} is not a folder")
            return path
    return None


def read_channel(folder: Path) -> list[dict]:
    """Records from every `*.jsonl` / `*.json` file in a channel folder (JSON lines, a JSON list,
    or SQuAD's nested `{"data": [...]}` layout)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    if not files:
        raise UsageError(f"data channel {folder} holds no *.jsonl or *.json files")
    records: list[dict] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, list):
            records.extend(whole)
        elif isinstance(whole, dict) and isinstance(whole.get("data"), list):
            records.extend(_flatten_squad(whole["data"]))
        elif isinstance(whole, dict):
            records.append(whole)
        else:
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return records


def _flatten_squad(articles: list[dict]) -> list[dict]:
    out = []
    for article in articles:
        for para in article.get("paragraphs", []):
            for qa in para.get("qas", []):
                out.append(
                    {
                        "id": qa["id"],
                        "title": article.get("title", ""),
                        "context": para["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in qa.get("answers", [])],
                            "answer_start": [a["answer_start"] for a in qa.get("answers", [])],
                        },
                    }
                )
    return out


def _class_label_names(raw: object) -> list[str]:
    for split in getattr(raw, "values", lambda: [])():
        feature = getattr(split, "features", {}).get("label")
        names = getattr(feature, "names", None)
        if names:
            return [str(name) for name in names]
    return []


def load_splits(
    script_args: ScriptArguments,
    need_train: bool,
    need_eval: bool,
    eval_splits: Sequence[str] = ("validation", "validation_matched", "test"),
    label_names_out: list[str] | None = None,
) -> tuple[list[dict] | None, list[dict] | None]:
    """(train records, eval records) from the SageMaker channels, else from `datasets.load_dataset`;
    a hub dataset's ClassLabel names for `label` are appended to `label_names_out` when given."""
    train_dir = _channel("SM_CHANNEL_TRAIN", "SM_CHANNEL_TRAINING")
    eval_dir = _channel("SM_CHANNEL_TEST", "SM_CHANNEL_VALIDATION", "SM_CHANNEL_EVAL")
    if train_dir or eval_dir:
        if need_train and not train_dir:
            raise UsageError("--do_train needs a training channel: SM_CHANNEL_TRAIN is not set")
        if need_eval and not eval_dir:
            raise UsageError("--do_eval needs an evaluation channel: SM_CHANNEL_TEST is not set")
        train = read_channel(train_dir) if need_train and train_dir else None
        evals = read_channel(eval_dir) if need_eval and eval_dir else None
    else:
        if not script_args.dataset_name:
            raise UsageError(
                "no data: set SM_CHANNEL_TRAIN (and SM_CHANNEL_TEST) to folders of JSON-lines files,"
                " or pass --dataset_name"
            )
        try:
            import datasets
        except ImportError:
            raise UsageError(
                f"no data channel is set and the `datasets` library is not installed to load"
                f" --dataset_name {script_args.dataset_name}"
            ) from None
        raw = datasets.load_dataset(script_args.dataset_name, script_args.dataset_config_name)
        if label_names_out is not None:
            label_names_out.extend(_class_label_names(raw))
        train = [dict(r) for r in raw["train"]] if need_train else None
        evals = None
        if need_eval:
            split = next((s for s in eval_splits if s in raw), None)
            if split is None:
                raise UsageError(f"dataset {script_args.dataset_name} has no split among {list(eval_splits)}")
            evals = [dict(r) for r in raw[split]]
    if train is not None and script_args.max_train_samples:
        train = train[: script_args.max_train_samples]
    if evals is not None and script_args.max_eval_samples:
        evals = evals[: script_args.max_eval_samples]
    if need_train and not train:
        raise UsageError("the training data is empty")
    if need_eval and not evals:
        raise UsageError("the evaluation data is empty")
    return train, evals
