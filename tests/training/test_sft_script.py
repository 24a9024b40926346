"""train_sft.py's arguments and refusals on the newest image's runtime (TRL 0.28, PEFT 0.18, transformers 5.3),
run as the job runs it: the FSDP settings the plan writes reach the Trainer's FSDP plugin with the model's decoder
layer class; a record that is no chat, or a model without a chat template, is one sentence naming where, never
what the data holds. (Training itself, its checkpoints and resume: tests/bot/test_llm_local_e2e.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jobs.backends.local.runtime import Runtime
from jobs.planning.fsdp import fsdp_hyperparameters
from jobs.planning.grammar import parse_command
from tests.support.runtimes import llm_runtime  # noqa: F401  (fixture)
from tests.training.conftest import TRAINING_DIR

CHECKS = r"""
import json, sys
import train_sft
argv = json.loads(sys.argv[1])
script, sft, config = train_sft.parse(argv)
class Model:
    _no_split_modules = ["Qwen2DecoderLayer"]
train_sft.wrap_decoder_layers(Model(), config)
print(json.dumps({"plugin": config.fsdp_plugin_args, "gc": config.gradient_checkpointing,
                  "max_length": config.max_length, "lora_r": sft.lora_r, "use_lora": sft.use_lora}, default=str))
"""


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first test to ask for the runtime builds it (pip)
def test_the_plans_fsdp_arguments_reach_the_trainers_fsdp_plugin(llm_runtime: Runtime, tmp_path: Path) -> None:  # noqa: F811
    hps = fsdp_hyperparameters(parse_command("llm-fsdp"))
    argv = ["--model_name_or_path", "m", "--output_dir", str(tmp_path), "--checkpoint_dir", str(tmp_path / "c"),
            "--use_cpu", "True", "--max_seq_length", "2048", "--use_lora", "False",
            *[item for key, value in hps.items() for item in (f"--{key}", str(value))]]
    done = subprocess.run([str(llm_runtime.python), "-c", CHECKS, json.dumps(argv)], cwd=TRAINING_DIR,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["plugin"]["transformer_cls_names_to_wrap"] == "Qwen2DecoderLayer"
    assert found["plugin"]["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert found["plugin"]["sharding_strategy"].lower().endswith("full_shard")
    assert (found["gc"], found["max_length"], found["use_lora"]) == (False, 2048, False)
    assert "[fsdp] full_shard auto_wrap; wrapping Qwen2DecoderLayer; activation checkpointing on" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_data_that_is_no_chat_is_one_sentence_naming_where(llm_runtime: Runtime, tmp_path: Path) -> None:  # noqa: F811
    train = tmp_path / "train"
    train.mkdir()
    secret = "sk-live-do-not-print-me"
    (train / "chats.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
        + "\n" + json.dumps({"messages": [{"role": "hacker", "content": secret}]}) + "\n")
    env = {"SM_CHANNEL_TRAIN": str(train), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([str(llm_runtime.python), "train_sft.py", "--model_name_or_path", str(tmp_path / "none"),
                           "--output_dir", str(tmp_path / "out"), "--checkpoint_dir", str(tmp_path / "c"),
                           "--do_train", "True", "--use_cpu", "True"],
                          cwd=TRAINING_DIR, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("train_sft.py: error:")]
    assert line == ("train_sft.py: error: training data file chats.jsonl, record 2: turn 1 has no role among "
                    "system, user, assistant, tool")
    assert secret not in done.stderr + done.stdout and "Traceback" not in done.stderr
