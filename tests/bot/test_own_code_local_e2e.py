"""A team's own Trainer script, from a git repository the test makes, launched with the installed `trainbot`
on the local backend: it trains the tiny offline BERT for real on the runtime of its training image
(transformers 4.28.1, the session's image runtime), and the report's loss and eval accuracy come from the lines
the script's Trainer printed (the script knows nothing of trainbot).

Each command is a fresh process, as in a shell; the state between them lives in TRAINBOT_HOME.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.backends.local.offline_assets import LocalAssets, ensure_local_assets
from jobs.backends.local.runtime import ImageRuntimes, Runtime, ensure_runtime_assets
from tests.support.assets import seed_assets
from tests.support.environment import outside_env
from tests.support.git_repos import make_repo
from tests.support.runtimes import CACHE_HOME, link_runtimes, ran_on_image_runtime

TRAINBOT = Path(sys.executable).with_name("trainbot")
JOB_TIMEOUT_S = 240

TEXT_DATA = '''\
"""Reads the channel files: JSON lines of {"text", "label"}."""
import json
from pathlib import Path


def read_jsonl(folder):
    records = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records
'''

TRAIN_SCRIPT = '''\
"""A team's text classifier: a plain Hugging Face Trainer script."""
import os
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments

from textdata import read_jsonl  # a sibling module: the entry's folder is the source_dir


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="bert-base-uncased")
    max_seq_length: int = field(default=64)


class Encoded(torch.utils.data.Dataset):
    def __init__(self, tokenizer, records, max_len, labels):
        self.enc = tokenizer([r["text"] for r in records], truncation=True, max_length=max_len, padding="max_length")
        self.labels = [labels.index(str(r["label"])) for r in records]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {key: torch.tensor(values[i]) for key, values in self.enc.items()}
        item["labels"] = torch.tensor(self.labels[i])
        return item


def accuracy(prediction):
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def main():
    model_args, training_args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(model_args.model_name_or_path, num_labels=2)
    train_records = read_jsonl(os.environ["SM_CHANNEL_TRAIN"])[:320]
    labels = sorted({str(r["label"]) for r in train_records})  # names ("neg", "pos") or numbers
    train = Encoded(tokenizer, train_records, model_args.max_seq_length, labels)
    test = Encoded(tokenizer, read_jsonl(os.environ["SM_CHANNEL_TEST"])[:32], model_args.max_seq_length, labels)
    trainer = Trainer(model=model, args=training_args, train_dataset=train, eval_dataset=test, compute_metrics=accuracy)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
'''


def trainbot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINBOT), *args], env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_a_teams_trainer_script_from_git_trains_locally_and_reports_its_own_metrics(
    tmp_path: Path, local_assets: LocalAssets, image_runtime: Runtime
) -> None:
    repo = make_repo(tmp_path / "git", "team-models")
    commit = repo.commit({"classifier/train_text.py": TRAIN_SCRIPT, "classifier/textdata.py": TEXT_DATA})
    home = seed_assets(tmp_path / "home", local_assets)
    link_runtimes(home)
    data = ensure_local_assets(home).imdb_train.parent  # train/ and test/ channels of generated reviews
    # The team's own model folder (the job trains what it names; a hub id is refused offline): the tiny BERT as
    # the image's transformers saved it, under TRAINBOT_HOME/data where local jobs may read.
    model = home / "data" / "team-model"
    shutil.copytree(ensure_runtime_assets(ImageRuntimes(CACHE_HOME), image_runtime).model_dir, model)
    env = outside_env()
    env.update(TRAINBOT_HOME=str(home), TRAINBOT_BACKEND="local", TRAINBOT_CODE_SOURCES=repo.url,
               TRAINBOT_LOCAL_DATA_DIRS=str(data))  # the generated reviews may be read by local jobs

    refused = trainbot({**env, "TRAINBOT_CODE_SOURCES": "https://github.com/other/"}, "launch",
                       f"code=git+{repo.url}@main", "entry=classifier/train_text.py", f"model={model}",
                       f"train_data={data}")
    assert refused.returncode == 2 and "not among the sources" in refused.stderr, refused.stderr

    launched = trainbot(
        env, "launch", f"code=git+{repo.url}@main", "entry=classifier/train_text.py", f"model={model}",
        f"train_data={data}", "max_steps=20", "batch_size=8", "lr=0.002", "max_seq_length=64", "logging_steps=5",
        "eval_steps=10", "hp.evaluation_strategy=steps", "hp.report_to=none", "hp.save_strategy=no",
        "hp.output_dir=/opt/ml/model",  # the script requires it; the bot adds nothing the team did not type
    )
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip().splitlines()[-1]

    report: dict = {}
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        assert trainbot(env, "watch", "--once").returncode == 0
        status = trainbot(env, "status", lineage, "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        if not report["partial"]:
            break
        time.sleep(2)
    log = (home / "local-jobs" / f"{lineage}-1" / "logs" / "train.log").read_text()
    assert report["status"] == "completed", log[-3000:]
    assert report["task"] is None and report["code"].endswith(f"@{commit[:7]} (main), entry classifier/train_text.py")
    assert {"loss", "eval_loss", "eval_accuracy"} <= set(report["metrics"]), report["metrics"]
    assert "[metric]" not in log  # every figure came from what the Trainer itself printed
    assert ran_on_image_runtime(home / "local-jobs" / f"{lineage}-1", log)  # the image's packages, not the bot's
    printed = re.findall(r"'eval_accuracy': '?([0-9.]+)", log)  # transformers 5 prints '0.5312', 4.x 0.53125
    assert printed and report["metrics"]["eval_accuracy"] == pytest.approx(float(printed[-1]))
    model = home / "local-jobs" / f"{lineage}-1" / "model"
    assert (model / "config.json").is_file()  # --output_dir /opt/ml/model landed in the job's model folder

    text = trainbot(env, "status", lineage)
    assert "code file://" in text.stdout and "loss" in text.stdout and "eval_accuracy" in text.stdout
