"""A record the scripts cannot use is named by file and record number with what is wrong, never quoted:
the message is the job's failure reason, posted to chat, and a data file may hold secrets."""

from __future__ import annotations

import json
from pathlib import Path

import data_channels
import pytest
import record_checks
import script_arguments

from tests.training.conftest import run_script, script_env

SECRET = "sk-live-7f3a9c1e5b2d4f6a8c0e"


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], check: data_channels.RecordCheck,
         max_train_samples: int | None = None) -> list[dict] | None:
    train = tmp_path / "train"
    train.mkdir()
    for name, text in files.items():
        (train / name).write_text(text) if isinstance(text, str) else (train / name).write_bytes(text)
    for name in ("SM_CHANNEL_TEST", "SM_CHANNEL_TRAINING", "SM_CHANNEL_VALIDATION", "SM_CHANNEL_EVAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(train))
    args = script_arguments.ScriptArguments(model_name_or_path="m", max_train_samples=max_train_samples)
    records, _ = data_channels.load_splits(args, True, False, check=check)
    return records


def refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str],
            check: data_channels.RecordCheck = record_checks.classification_records) -> str:
    with pytest.raises(script_arguments.UsageError) as caught:
        load(tmp_path, monkeypatch, files, check)
    message = str(caught.value)
    assert SECRET not in message and "hunter2" not in message, message
    assert "\n" not in message
    return message


def lines(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


GOOD = {"text": "a fine film", "label": 1}


@pytest.mark.parametrize(
    ("record", "what"),
    [
        ({"text": "ok", "label": SECRET}, "label is text, not a whole number"),
        ({"text": "ok", "label": [SECRET]}, "label is a list, not a whole number"),
        ({"text": "ok", "label": 1.5}, "label is a number, not a whole number"),
        ({"text": {"k": SECRET}, "label": 1}, "text is an object, not text"),
        ({"label": 1, "review": SECRET}, "text is missing, not text"),
        ({"text": 42, "label": 1}, "text is a number, not text"),
    ],
)
def test_classification_records_name_the_file_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict, what: str
) -> None:
    files = {"a.jsonl": lines(GOOD, GOOD), "b.jsonl": lines(GOOD, GOOD, record)}
    assert refusal(tmp_path, monkeypatch, files) == f"training data file b.jsonl, record 3: {what}"


def test_unknown_columns_are_not_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    message = refusal(tmp_path, monkeypatch, {"a.jsonl": lines({"password": "hunter2", SECRET: 1})})
    assert message.startswith("training data file a.jsonl, record 1: has none of the text columns (premise/hypothesis")
    assert "password" not in message


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"a.json": json.dumps([SECRET])}, "file a.json, record 1: is str, not a JSON object"),
        ({"a.jsonl": f"{SECRET} {{\n"}, "a.jsonl:1: not JSON (Expecting value)"),
        ({"a.jsonl": b"\xff" + SECRET.encode()}, "a.jsonl: not UTF-8 text (byte 0)"),
        ({"a.json": json.dumps({"data": [{"paragraphs": [{"qas": [{"id": SECRET}]}]}]})},
         "a.json: article 1 is not in SQuAD's layout (no 'context')"),
    ],
)
def test_files_that_are_not_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict, words: str) -> None:
    assert words in refusal(tmp_path, monkeypatch, files)


QA_GOOD = {"id": "1", "question": "who?", "context": "Ada wrote it", "answers": {"text": ["Ada"], "answer_start": [0]}}


@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"context": None}, "context is missing, not text"),
        ({"question": [SECRET]}, "question is a list, not text"),
        ({"id": True}, "id is yes/no, not text or a number"),
        ({"answers": SECRET}, "answers is text, not an object with text and answer_start lists"),
        ({"answers": {"text": [1], "answer_start": [0]}}, "answers.text is not a list of texts"),
        ({"answers": {"text": [SECRET], "answer_start": [SECRET]}}, "answers.answer_start is not a list of whole numbers"),
        ({"answers": {"text": ["Ada", "x"], "answer_start": [0]}}, "answers has 2 texts but 1 answer_start positions"),
        ({"answers": {"text": ["Ada"], "answer_start": [99]}}, "an answer_start lies outside the context"),
    ],
)
def test_qa_records_name_the_file_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, what: str
) -> None:
    files = {"squad.jsonl": lines(QA_GOOD, {**QA_GOOD, **change, "title": SECRET})}
    message = refusal(tmp_path, monkeypatch, files, record_checks.qa_records)
    assert message == f"training data file squad.jsonl, record 2: {what}"


def test_good_records_pass_and_only_the_records_trained_on_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"a.jsonl": lines(GOOD, {"text": "no label"}, {"text": "x", "label": "2"}, {"text": "y", "label": SECRET})}
    records = load(tmp_path, monkeypatch, files, record_checks.classification_records, max_train_samples=3)
    assert records is not None and len(records) == 3


def test_the_script_exits_2_with_the_summary_and_never_prints_the_value(tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.mkdir()
    (train / "reviews.jsonl").write_text(lines(GOOD, {"text": "ok", "label": SECRET}))
    env = script_env(train, train)
    done = run_script("train_classification.py", ["--model_name_or_path", "unused", "--output_dir", str(tmp_path / "o")],
                      env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "training data file reviews.jsonl, record 2: label is text, not a whole number" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
