"""Training and evaluation records: the SageMaker `SM_CHANNEL_*` folders of JSON files, else
`datasets.load_dataset(--dataset_name)`.

A record the script cannot use is reported by where it is and what is wrong with it (`UsageError`:
"training data file reviews.jsonl, record 3: label is text, not a whole number"), never by its content:
the message becomes the job's failure reason, posted to chat, and data may hold anything.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from script_arguments import ScriptArguments, UsageError


class BadRecord(Exception):
    """Record `index` (0-based, in the list checked) cannot be used: `what`, in words that hold none of its content."""

    def __init__(self, index: int, what: str) -> None:
        super().__init__(what)
        self.index = index
        self.what = what


#: A script's check of its records: raises BadRecord for the first one it cannot use.
RecordCheck = Callable[[list[Any]], None]


class Sources:
    """Where each record of a split came from: (first index, file or dataset name) in order."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._names: list[str] = []

    def add(self, start: int, name: str) -> None:
        self._starts.append(start)
        self._names.append(name)

    def where(self, index: int) -> str:
        i = max(0, bisect.bisect_right(self._starts, index) - 1)
        start = self._starts[i] if self._starts else 0
        name = self._names[i] if self._names else "the data"
        return f"{name}, record {index - start + 1}"


#: Records and where they came from.
Split = tuple[list[Any], Sources]


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
    return [record for _, records in read_channel_files(folder) for record in records]


def read_channel_files(folder: Path) -> list[tuple[Path, list[Any]]]:
    """(file, its records) for every `*.jsonl` / `*.json` file of a channel folder, in name order."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    if not files:
        raise UsageError(f"data channel {folder} holds no *.jsonl or *.json files")
    return [(path, _read_file(path)) for path in files]


def _read_file(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        return whole
    if isinstance(whole, dict) and isinstance(whole.get("data"), list):
        return _flatten_squad(path, whole["data"])
    if isinstance(whole, dict):
        return [whole]
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return records


def _flatten_squad(path: Path, articles: list[Any]) -> list[dict]:
    out = []
    for number, article in enumerate(articles, 1):
        try:
            out.extend(_squad_article(article))
        except (KeyError, TypeError, AttributeError) as exc:
            missing = f"no {exc.args[0]!r}" if isinstance(exc, KeyError) else "a field of the wrong type"
            raise UsageError(f"{path}: article {number} is not in SQuAD's layout ({missing})") from None
    return out


def _squad_article(article: dict) -> list[dict]:
    return [
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
        for para in article.get("paragraphs", [])
        for qa in para.get("qas", [])
    ]


def checked(records: list[Any], sources: Sources, split: str, check: RecordCheck | None) -> list[dict]:
    """`records` once every one is a JSON object and passes `check`; else UsageError saying where and what."""
    try:
        for index, record in enumerate(records):
            if not isinstance(record, dict):
                raise BadRecord(index, f"is {type(record).__name__}, not a JSON object")
        if check is not None:
            check(records)
    except BadRecord as bad:
        raise UsageError(f"{split} {sources.where(bad.index)}: {bad.what}") from None
    return records


def _from_channel(folder: Path) -> tuple[list[Any], Sources]:
    records: list[Any] = []
    sources = Sources()
    for path, found in read_channel_files(folder):
        sources.add(len(records), f"file {path.relative_to(folder)}")
        records.extend(found)
    return records, sources


def _class_label_names(raw: object) -> list[str]:
    for split in getattr(raw, "values", lambda: [])():
        feature = getattr(split, "features", {}).get("label")
        names = getattr(feature, "names", None)
        if names:
            return [str(name) for name in names]
    return []


def _from_hub(name: str, split: str, rows: Any) -> tuple[list[Any], Sources]:
    sources = Sources()
    sources.add(0, f"dataset {name} split {split}")
    return [dict(r) for r in rows], sources


def load_splits(
    script_args: ScriptArguments,
    need_train: bool,
    need_eval: bool,
    eval_splits: Sequence[str] = ("validation", "validation_matched", "test"),
    check: RecordCheck | None = None,
    label_names_out: list[str] | None = None,
) -> tuple[list[dict] | None, list[dict] | None]:
    """(train records, eval records) from the SageMaker channels, else from `datasets.load_dataset`;
    every record used passes the script's `check`. A hub dataset's ClassLabel names for `label` are
    appended to `label_names_out` when given."""
    train, evals = _load(script_args, need_train, need_eval, eval_splits, label_names_out)
    if train is not None and script_args.max_train_samples:
        train = (train[0][: script_args.max_train_samples], train[1])
    if evals is not None and script_args.max_eval_samples:
        evals = (evals[0][: script_args.max_eval_samples], evals[1])
    if need_train and not (train and train[0]):
        raise UsageError("the training data is empty")
    if need_eval and not (evals and evals[0]):
        raise UsageError("the evaluation data is empty")
    return (
        checked(*train, "training data", check) if train is not None else None,
        checked(*evals, "evaluation data", check) if evals is not None else None,
    )


def _load(
    script_args: ScriptArguments, need_train: bool, need_eval: bool, eval_splits: Sequence[str],
    label_names_out: list[str] | None,
) -> tuple[Split | None, Split | None]:
    train_dir = _channel("SM_CHANNEL_TRAIN", "SM_CHANNEL_TRAINING")
    eval_dir = _channel("SM_CHANNEL_TEST", "SM_CHANNEL_VALIDATION", "SM_CHANNEL_EVAL")
    if train_dir or eval_dir:
        if need_train and not train_dir:
            raise UsageError("--do_train needs a training channel: SM_CHANNEL_TRAIN is not set")
        if need_eval and not eval_dir:
            raise UsageError("--do_eval needs an evaluation channel: SM_CHANNEL_TEST is not set")
        train = _from_channel(train_dir) if need_train and train_dir else None
        evals = _from_channel(eval_dir) if need_eval and eval_dir else None
        return train, evals
    return _from_datasets(script_args, need_train, need_eval, eval_splits, label_names_out)


def _from_datasets(
    script_args: ScriptArguments, need_train: bool, need_eval: bool, eval_splits: Sequence[str],
    label_names_out: list[str] | None,
) -> tuple[Split | None, Split | None]:
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
    raw = datasets.load_dataset(
        script_args.dataset_name, script_args.dataset_config_name, revision=script_args.dataset_revision
    )
    if label_names_out is not None:
        label_names_out.extend(_class_label_names(raw))
    name = script_args.dataset_name
    train = _from_hub(name, "train", raw["train"]) if need_train else None
    evals = None
    if need_eval:
        split = next((s for s in eval_splits if s in raw), None)
        if split is None:
            raise UsageError(f"dataset {name} has no split among {list(eval_splits)}")
        evals = _from_hub(name, split, raw[split])
    return train, evals
