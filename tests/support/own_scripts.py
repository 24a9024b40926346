"""Training scripts written the way the public Hugging Face SageMaker examples write them, for the own-code tests:
argparse with ``parse_known_args``, ``load_from_disk`` of ``SM_CHANNEL_TRAIN`` and ``SM_CHANNEL_TEST``, a metric
from ``evaluate`` or ``datasets.load_metric``, ``get_last_checkpoint(args.output_dir)`` to resume, ``fp16`` on by
default, the model named by the script's own ``--model_id``, and the final evaluation printed as ``key = value``.
They know nothing of trainbot. Plus what the tests give them offline: channels saved with ``save_to_disk`` and an
accuracy metric as a local metric script (``evaluate.load(PATH)``, ``datasets.load_metric(PATH)``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

#: The getting-started example's shape: its own --fp16 parser (so hp.fp16=false turns it off), a metric from
#: evaluate, checkpoints each epoch in --output_dir and a resume from the newest one there.
SPOT_CLASSIFIER = '''\
import argparse
import logging
import os
import sys

import evaluate
import numpy as np
from datasets import load_from_disk
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


def str2bool(value):
    return str(value).lower() in ("true", "1", "yes")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--eval_batch_size", type=int, default=64)
    parser.add_argument("--learning_rate", type=str, default=5e-5)
    parser.add_argument("--model_id", type=str)
    parser.add_argument("--metric", type=str, default="accuracy")
    parser.add_argument("--fp16", type=str2bool, default=True)
    parser.add_argument("--output_dir", type=str, default="/opt/ml/checkpoints")
    parser.add_argument("--output_data_dir", type=str, default=os.environ["SM_OUTPUT_DATA_DIR"])
    parser.add_argument("--model_dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--n_gpus", type=str, default=os.environ["SM_NUM_GPUS"])
    parser.add_argument("--training_dir", type=str, default=os.environ["SM_CHANNEL_TRAIN"])
    parser.add_argument("--test_dir", type=str, default=os.environ["SM_CHANNEL_TEST"])
    args, _ = parser.parse_known_args()

    logger = logging.getLogger(__name__)
    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(sys.stdout)])

    train_dataset = load_from_disk(args.training_dir)
    test_dataset = load_from_disk(args.test_dir)
    logger.info(f" loaded train_dataset length is: {len(train_dataset)}")

    tokenizer = AutoTokenizer.from_pretrained(args.model_id)

    def tokenize(batch):
        return tokenizer(batch["text"], padding="max_length", truncation=True, max_length=48)

    train_dataset = train_dataset.map(tokenize, batched=True)
    test_dataset = test_dataset.map(tokenize, batched=True)
    metric = evaluate.load(args.metric)

    def compute_metrics(eval_pred):
        predictions = np.argmax(eval_pred.predictions, axis=1)
        return metric.compute(predictions=predictions, references=eval_pred.label_ids)

    model = AutoModelForSequenceClassification.from_pretrained(args.model_id, num_labels=2)
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.train_batch_size,
        per_device_eval_batch_size=args.eval_batch_size,
        evaluation_strategy="epoch",
        save_strategy="epoch",
        logging_dir=f"{args.output_data_dir}/logs",
        logging_steps=5,
        learning_rate=float(args.learning_rate),
        fp16=args.fp16,
    )
    trainer = Trainer(model=model, args=training_args, compute_metrics=compute_metrics,
                      train_dataset=train_dataset, eval_dataset=test_dataset, tokenizer=tokenizer)
    last_checkpoint = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    if last_checkpoint is not None:
        logger.info(f"continuing training from checkpoint {last_checkpoint}")
    trainer.train(resume_from_checkpoint=last_checkpoint)

    eval_result = trainer.evaluate(eval_dataset=test_dataset)
    with open(os.path.join(args.output_data_dir, "eval_results.txt"), "w") as writer:
        print("***** Eval results *****")
        for key, value in sorted(eval_result.items()):
            writer.write(f"{key} = {value}\\n")
            print(f"{key} = {value}\\n")
    trainer.save_model(args.model_dir)
'''

#: The examples' other habit: ``--fp16`` read with ``type=bool``, which takes the toolkit's "False" as True.
INSISTS_ON_FP16 = SPOT_CLASSIFIER.replace('parser.add_argument("--fp16", type=str2bool, default=True)',
                                          'parser.add_argument("--fp16", type=bool, default=True)')

#: The older examples' metric: ``datasets.load_metric`` (gone in datasets 3, there in the 4.x images).
LOAD_METRIC_CLASSIFIER = SPOT_CLASSIFIER.replace("import evaluate\n", "").replace(
    "from datasets import load_from_disk", "from datasets import load_from_disk, load_metric").replace(
    "metric = evaluate.load(args.metric)", "metric = load_metric(args.metric)")

ACCURACY_METRIC = '''\
"""Accuracy, as the hub's metric computes it (scikit-learn's accuracy_score), for offline use."""
import datasets
import evaluate
from sklearn.metrics import accuracy_score


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="accuracy", citation="", inputs_description="predictions, references",
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references):
        return {"accuracy": float(accuracy_score(references, predictions))}
'''

LOAD_METRIC_ACCURACY = ACCURACY_METRIC.replace("import evaluate\n", "").replace(
    "evaluate.Metric", "datasets.Metric").replace("evaluate.MetricInfo", "datasets.MetricInfo")

_SAVE_CHANNELS = '''\
import json, sys
from datasets import Dataset
records = [json.loads(line) for line in open(sys.argv[1])]
labels = sorted({r["label"] for r in records})
for name, start, stop in (("train", 0, int(sys.argv[3])), ("test", int(sys.argv[3]), int(sys.argv[3]) + int(sys.argv[4]))):
    part = records[start:stop]
    Dataset.from_dict({"text": [r["text"] for r in part], "label": [labels.index(r["label"]) for r in part]}
                      ).save_to_disk(f"{sys.argv[2]}/{name}")
'''


def save_channels(python: Path, jsonl: Path, dest: Path, *, train: int, test: int) -> tuple[Path, Path]:
    """train/ and test/ as ``Dataset.save_to_disk`` writes them, with the runtime's own datasets."""
    env = {"PATH": os.environ.get("PATH", ""), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(dest.parent / "hf-home")}
    done = subprocess.run([str(python), "-c", _SAVE_CHANNELS, str(jsonl), str(dest), str(train), str(test)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dest / "train", dest / "test"


def write_metric(folder: Path, *, for_load_metric: bool = False) -> Path:
    """A local metric script folder that ``evaluate.load`` (or ``datasets.load_metric``) reads offline."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{folder.name}.py").write_text(LOAD_METRIC_ACCURACY if for_load_metric else ACCURACY_METRIC)
    return folder


def printed_final(log: str, name: str) -> float:
    """The last ``name = value`` line the script printed (its final evaluation)."""
    values = [line.split(" = ", 1)[1] for line in log.splitlines() if line.startswith(f"{name} = ")]
    assert values, f"the script printed no {name} = ... line"
    return float(json.loads(values[-1]))


#: transformers' own examples' habit: a strict HfArgumentParser over the script's own dataclass, with no
#: output_dir field (it writes where SageMaker says, SM_MODEL_DIR): any argument it was not given a field for is
#: refused ("Some specified arguments are not used by the HfArgumentParser"), so an added --output_dir fails it.
STRICT_HF_PARSER = '''\
import os
from dataclasses import dataclass, field

import numpy as np
from datasets import load_from_disk
from transformers import AutoModelForSequenceClassification, AutoTokenizer, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ScriptArguments:
    model_id: str = field(metadata={"help": "the model folder or hub id"})
    epochs: float = field(default=1.0)
    train_batch_size: int = field(default=16)
    learning_rate: float = field(default=5e-5)


if __name__ == "__main__":
    (args,) = HfArgumentParser(ScriptArguments).parse_args_into_dataclasses()  # strict: unknown arguments fail
    print(f"MY_FLAG={os.environ.get('MY_FLAG', '<unset>')}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model_id)
    train = load_from_disk(os.environ["SM_CHANNEL_TRAIN"])
    test = load_from_disk(os.environ["SM_CHANNEL_TEST"])

    def tokenize(batch):
        return tokenizer(batch["text"], padding="max_length", truncation=True, max_length=32)

    train, test = train.map(tokenize, batched=True), test.map(tokenize, batched=True)
    model = AutoModelForSequenceClassification.from_pretrained(args.model_id, num_labels=2)
    training_args = TrainingArguments(output_dir=os.environ["SM_MODEL_DIR"], num_train_epochs=args.epochs,
                                      per_device_train_batch_size=args.train_batch_size, logging_steps=5,
                                      learning_rate=args.learning_rate, save_strategy="no", report_to=[])

    def accuracy(eval_pred):
        return {"accuracy": float((np.argmax(eval_pred.predictions, axis=1) == eval_pred.label_ids).mean())}

    trainer = Trainer(model=model, args=training_args, train_dataset=train, eval_dataset=test,
                      compute_metrics=accuracy)
    trainer.train()
    for key, value in sorted(trainer.evaluate().items()):
        print(f"{key} = {value}")
    trainer.save_model(os.environ["SM_MODEL_DIR"])
    tokenizer.save_pretrained(os.environ["SM_MODEL_DIR"])
'''

#: A script that needs a variable of its environment (env.NAME=VALUE), as accelerate's launcher and many
#: scripts do: it fails without it.
READS_ENVIRONMENT = '''\
import os
import sys

flag = os.environ.get("MY_FLAG")
if flag != "on":
    print(f"MY_FLAG is {flag!r}: set it", flush=True)
    sys.exit(3)
print("MY_FLAG=on", flush=True)
print("eval_loss = 0.25")
'''

#: The metric definitions public examples pass: the value is the first group, a second group inside it.
TWO_GROUP_METRICS = "loss_2g:'loss': ([0-9]+(.|e\\-)[0-9]+),?,acc_2g:eval_accuracy = ([0-9]+(.|e\\-)[0-9]+)"

#: An inference handler as sagemaker-huggingface-inference-toolkit loads one from code/inference.py: model_fn
#: loads from the model folder, predict_fn answers (input_fn and output_fn stay the toolkit's: JSON in and out).
INFERENCE_HANDLER = '''\
import torch
from transformers import AutoModel, AutoTokenizer


def model_fn(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    return model, tokenizer


def predict_fn(data, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sentences = data.pop("inputs", data)
    encoded = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**encoded)
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    embeddings = (output.last_hidden_state * mask).sum(1) / mask.sum(1)
    return {"vectors": torch.nn.functional.normalize(embeddings, p=2, dim=1).tolist()}
'''
