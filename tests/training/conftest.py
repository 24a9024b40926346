"""Fixtures for the training scripts: a tiny BERT and generated channels, and a way to run the scripts
as SageMaker does (`python train_qa.py ...` with training/ as the working directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from jobs.backends.local.offline_assets import LocalAssets
from jobs.backends.local.runtime import Runtime
from tests.support.moto_server import moto_aws_module, moto_server  # noqa: F401 (fixtures: test_transformers4)

TRAINING_DIR = Path(__file__).resolve().parents[2] / "training"
if str(TRAINING_DIR) not in sys.path:  # the scripts import their siblings as top-level modules
    sys.path.insert(0, str(TRAINING_DIR))

#: What the transformers-4 checks need beyond the image's own packages: safetensors (the scripts' compat layer
#: saves it), and the inference toolkit's pieces (sagemaker-inference, multi-model-server's `mms` Python package)
#: to serve the trained model as the inference image does.
TEST_EXTRAS_TF4 = ["safetensors", "sagemaker-inference", "multi-model-server"]
#: Installed with --no-deps: its hard dependencies are audio libraries (librosa, phonemizer) it does not
#: need for text models.
NO_DEPS_TF4 = ["sagemaker-huggingface-inference-toolkit>=2,<3"]

#: Small, fast settings shared by the runs (tiny BERT, short sequences).
QA_FAST = ["--max_seq_length", "96", "--doc_stride", "32", "--per_device_train_batch_size", "16"]
CLS_FAST = ["--max_seq_length", "64", "--per_device_train_batch_size", "32"]


@pytest.fixture(scope="session")
def assets(local_assets: LocalAssets) -> LocalAssets:
    """The session's tiny BERT and generated channels (tests/conftest.py), shared with the backend tests."""
    return local_assets


@pytest.fixture(scope="session")
def python4(image_runtime: Runtime) -> Path:
    """The interpreter of the product's transformers 4.28.1 image runtime (tests/support/runtimes.py, built once
    a session), with the test-only extras above on top (once)."""
    python = image_runtime.python
    ready = image_runtime.prefix / "trainbot-test-extras.json"
    if not ready.exists() or json.loads(ready.read_text()) != TEST_EXTRAS_TF4 + NO_DEPS_TF4:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TEST_EXTRAS_TF4], check=True, timeout=900)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *NO_DEPS_TF4], check=True,
                       timeout=300)
        ready.write_text(json.dumps(TEST_EXTRAS_TF4 + NO_DEPS_TF4))
    version = subprocess.run([str(python), "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == "4.28.1"
    return python


def script_env(train: Path | None, test: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_")}
    env.update(TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if train is not None:
        env["SM_CHANNEL_TRAIN"] = str(train)
    if test is not None:
        env["SM_CHANNEL_TEST"] = str(test)
    env.update(extra)
    return env


def run_script(
    script: str, args: Sequence[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=TRAINING_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def popen_script(script: str, args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, script, *args],
        cwd=TRAINING_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def load_weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))
