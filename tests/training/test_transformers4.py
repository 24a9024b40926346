"""The training scripts on the oldest transformers the launcher targets: 4.28.1, the version of the
smdistributed data-parallel containers. The rest of the suite runs them on transformers 5.

The product's image runtime for transformers 4.28.1 (jobs/backends/local/runtime.py, built once a session by
tests/support/runtimes.py; the `python4` fixture of conftest.py adds the inference toolkit) holds the image's
packages and the SageMaker training toolkit beside the same CPU torch; the
tiny model is built there too, since a tokenizer saved by transformers 5 names a class 4.28 does not have.
Under torch >= 2.6 (all this machine has) 4.28's Trainer cannot read its own RNG state file (the
containers' PyTorch 2.0 can): the resume test restores torch's old load default.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local import container as local_container
from jobs.backends.local.environment import base_environment
from jobs.backends.local.state import JobFolder
from jobs.planning.cadence import cadence_for_steps
from jobs.planning.plan import METRIC_DEFINITIONS
from tests.training.conftest import TRAINING_DIR, script_env

ROOT = TRAINING_DIR.parent


@pytest.fixture(scope="module")
def assets4(python4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home-tf4")
    build = ("from pathlib import Path; from jobs.backends.local.offline_assets import ensure_local_assets; "
             f"print(ensure_local_assets(Path({str(home)!r})).root)")
    done = subprocess.run([str(python4), "-c", build], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1])


def run4(python: Path, script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), script, *args], cwd=TRAINING_DIR, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def metrics(stdout: str) -> dict[str, float]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("[metric] "):
            name, _, rest = line.removeprefix("[metric] ").partition("=")
            found[name] = float(rest.split()[0])
    return found


def test_classification_trains_and_saves_on_transformers_4(python4: Path, assets4: Path, tmp_path: Path) -> None:
    env = script_env(assets4 / "imdb" / "train", assets4 / "imdb" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "64", "--per_device_train_batch_size",
            "32", "--learning_rate", "2e-3", "--max_steps", "60", "--logging_steps", "30", "--save_steps", "30",
            "--do_train", "True", "--do_eval", "True", "--sagemaker_program", "train_classification.py"]
    done = run4(python4, "train_classification.py", args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(done.stdout)["eval_accuracy"] >= 0.8
    assert (tmp_path / "model" / "model.safetensors").exists()  # 4.28 saves .bin; compat converts it


def test_question_answering_beats_the_trivial_baseline_on_transformers_4(
    python4: Path, assets4: Path, tmp_path: Path
) -> None:
    env = script_env(assets4 / "squad" / "train", assets4 / "squad" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "96", "--doc_stride", "32",
            "--per_device_train_batch_size", "32", "--learning_rate", "3e-3", "--max_steps", "120",
            "--logging_steps", "60", "--save_steps", "60", "--max_eval_samples", "200"]
    done = run4(python4, "train_qa.py", args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(done.stdout)["eval_f1"] >= 30  # the trivial baselines score under 15


def test_sigterm_saves_and_exits_143_on_transformers_4(python4: Path, assets4: Path, tmp_path: Path) -> None:
    env = script_env(assets4 / "imdb" / "train", assets4 / "imdb" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "64", "--per_device_train_batch_size",
            "32", "--max_steps", "100000", "--save_steps", "20", "--logging_steps", "50"]
    process = subprocess.Popen([str(python4), "train_classification.py", *args], cwd=TRAINING_DIR, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ckpt").glob("checkpoint-*/trainer_state.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    saved = sorted(int(p.parent.name.split("-")[1]) for p in (tmp_path / "ckpt").glob("checkpoint-*/trainer_state.json"))
    assert saved and saved[-1] > 20  # a save at the stop, past the periodic one
    assert not (tmp_path / "model" / "model.safetensors").exists()  # interrupted: no final model


# ------------------------------------------------------------------ through the images' toolkits


def toolkit_job(root: Path, name: str, assets: Path, checkpoints: Path, processes: int = 1, **hps: object) -> JobFolder:
    """An /opt/ml tree as the local backend lays it out: config, channels, the sourcedir archive."""
    folder = JobFolder(root, name)
    for path in (folder.model_dir, folder.output_dir, folder.log_path.parent):
        path.mkdir(parents=True, exist_ok=True)
    local_container.write_sourcedir(TRAINING_DIR, folder.sourcedir_path)
    # Small batches and few eval rows: these runs are about the toolkit's plumbing, not accuracy.
    base = {"model_name_or_path": str(assets / "tiny-bert"), "max_seq_length": 48, "per_device_train_batch_size": 8,
            "learning_rate": 2e-3, "use_cpu": True, "checkpoint_dir": str(checkpoints), "save_total_limit": 2,
            "max_train_samples": 400, "max_eval_samples": 50}
    local_container.write_container_config(
        folder, hyperparameters={**base, **hps}, channels={"train": assets / "imdb/train", "test": assets / "imdb/test"},
        entry_point="train_classification.py", instance_type="ml.p3.2xlarge", processes=processes,
        keep_free_bytes=0)
    return folder


def start_train(python: Path, folder: JobFolder, **extra: str) -> subprocess.Popen[bytes]:
    env = local_container.toolkit_environment(base_environment(str(python)), folder, threads=1)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", **extra)
    with folder.log_path.open("ab") as log:
        return subprocess.Popen([str(python.parent / "train")], env=env, cwd=folder.path, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def caught(log: str) -> dict[str, int]:
    """How many values each of the plan's MetricDefinitions regexes finds in a log, as CloudWatch would."""
    import re

    return {d["Name"]: len(re.findall(d["Regex"], log)) for d in METRIC_DEFINITIONS}


@pytest.mark.timeout(900)
def test_the_toolkit_trains_and_the_plans_metric_definitions_catch_the_curve(
    python4: Path, assets4: Path, tmp_path: Path
) -> None:
    steps = 60
    folder = toolkit_job(tmp_path, "tk-1", assets4, tmp_path / "ckpt", max_steps=steps, save_steps=1000,
                         **cadence_for_steps(steps, evaluates=True))
    process = start_train(python4, folder)
    assert process.wait(timeout=800) == 0, folder.log_path.read_text()[-3000:]
    log = folder.log_path.read_text()
    found = caught(log)
    assert found["loss"] >= 20, found
    assert found["eval_loss"] >= 4 and found["eval_accuracy"] >= 4 and found["train_loss"] == 1, found
    assert (folder.path / "output" / "success").is_file()

    # Served as the inference image serves model.tar.gz: unpacked, HuggingFaceHandlerService, the bot's payload.
    import tarfile

    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for item in folder.model_dir.iterdir():
            tar.add(str(item), arcname=item.name)
    serving = tmp_path / "serving"
    with tarfile.open(archive) as tar:
        tar.extractall(serving, filter="data")
    from jobs.endpoints.options import prediction_payload

    body = json.dumps(prediction_payload("text-classification", {"text": "a great wonderful brilliant film"}))
    env = {**base_environment(str(python4)), "HF_TASK": "text-classification", "HF_HUB_OFFLINE": "1"}
    served = subprocess.run([str(python4), str(Path(__file__).with_name("toolkit_serve.py")), str(serving), body],
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert served.returncode == 0, served.stderr[-3000:]
    (answer,) = json.loads(served.stdout.strip().splitlines()[-1])
    assert answer["label"] in ("neg", "pos")  # the data's label names, not LABEL_0 / LABEL_1


@pytest.mark.timeout(900)
def test_a_kill_without_sigterm_resumes_from_the_last_checkpoint_on_disk(
    python4: Path, assets4: Path, tmp_path: Path
) -> None:
    checkpoints = tmp_path / "ckpt"  # shared by the two attempts, as checkpoint_s3_uri is
    # Long enough that a fast machine cannot finish before the first save on the clock (1.2 s).
    total = 400
    hps = {"max_steps": total, "save_steps": 1000, "checkpoint_minutes": 0.02, "logging_steps": 2}
    first = toolkit_job(tmp_path, "kill-1", assets4, checkpoints, **hps)
    process = start_train(python4, first)
    furthest = checkpoints / "trainbot-furthest-step.json"

    def past_a_checkpoint() -> bool:
        saved = [int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/trainer_state.json")]
        return bool(saved) and furthest.is_file() and json.loads(furthest.read_text())["step"] > max(saved)

    deadline = time.monotonic() + 240
    while not past_a_checkpoint() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the job ended before a save on the clock: " + first.log_path.read_text()[-2000:]
    os.killpg(process.pid, signal.SIGKILL)  # what a reclaim does: nothing the script can act on
    assert process.wait(timeout=30) == -signal.SIGKILL
    saved = max(int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/trainer_state.json"))
    reached = json.loads(furthest.read_text())["step"]
    assert 0 < saved < total  # a save from the clock: save_steps (1000) alone never fires

    second = toolkit_job(tmp_path, "kill-2", assets4, checkpoints, **hps)
    # The images' PyTorch 2.0 reads 4.28's rng_state.pth; this machine's torch >= 2.6 refuses its numpy
    # arrays under the new weights_only default: restore the old default for the checkpoint we wrote.
    resumed = start_train(python4, second, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    assert resumed.wait(timeout=600) == 0, second.log_path.read_text()[-3000:]
    log = second.log_path.read_text()
    assert f"checkpoint-{saved}" in log and f"{reached - saved} step" in log
    final = json.loads((checkpoints / f"checkpoint-{total}" / "trainer_state.json").read_text())
    losses = [(e["step"], e["loss"]) for e in final["log_history"] if "loss" in e]
    steps = [s for s, _ in losses]
    assert steps == sorted(set(steps)) and steps[-1] == total
    whole = sum(loss * (step - prev) for (step, loss), prev in zip(losses, [0, *steps[:-1]], strict=True)) / total
    metrics = json.loads((second.output_dir / "metrics.json").read_text())
    assert metrics["train_loss"] == pytest.approx(whole)  # the lineage's mean, not this process's
    # (4.28's own figure divides this process's losses by all the steps: about (total - saved) / total of it.)


def samples_per_step(log: str) -> dict[int, list[int]]:
    """{step: the ids every process trained that step, sorted} from a log's `[samples]` lines."""
    import re

    steps: dict[int, list[int]] = {}
    for step, ids in re.findall(r"\[samples\] step=(\d+) rank=\d+ ids=([\d,]+)", log):
        steps.setdefault(int(step), []).extend(int(i) for i in ids.split(","))
    return {step: sorted(ids) for step, ids in steps.items()}


@pytest.mark.timeout(900)
def test_a_resume_on_twice_the_processes_trains_the_same_samples_on_transformers_4(
    python4: Path, assets4: Path, tmp_path: Path
) -> None:
    """The 4.28 line of tests/training/test_relaunch_global_batch.py, shorter: 40 steps, killed once its
    step-20 checkpoint is on disk, resumed under the toolkit's torchrun on 2 processes at half the batch."""
    hps = {"max_steps": 40, "save_steps": 10, "logging_steps": 5, "log_samples": True, "seed": 7}
    steady = toolkit_job(tmp_path, "steady-1", assets4, tmp_path / "ckpt-steady", per_device_train_batch_size=32, **hps)
    checkpoints = tmp_path / "ckpt"
    first = toolkit_job(tmp_path, "moved-1", assets4, checkpoints, per_device_train_batch_size=32, **hps)
    uninterrupted, process = start_train(python4, steady), start_train(python4, first)
    deadline = time.monotonic() + 240
    while not (checkpoints / "checkpoint-20" / "trainer_state.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    for later in checkpoints.glob("checkpoint-*"):  # killed at 20: a save past it never happened
        if int(later.name.split("-")[1]) > 20:
            shutil.rmtree(later)
    second = toolkit_job(tmp_path, "moved-2", assets4, checkpoints, processes=2, per_device_train_batch_size=16, **hps)
    resumed = start_train(python4, second, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    assert uninterrupted.wait(timeout=600) == 0, steady.log_path.read_text()[-3000:]
    assert resumed.wait(timeout=600) == 0, second.log_path.read_text()[-3000:]
    assert "resuming from" in second.log_path.read_text()

    expected = samples_per_step(steady.log_path.read_text())
    assert sorted(expected) == list(range(1, 41)) and all(len(ids) == 32 for ids in expected.values())
    seen = {**samples_per_step(first.log_path.read_text()), **samples_per_step(second.log_path.read_text())}
    assert {step: seen[step] for step in range(1, 41)} == expected
    losses = [json.loads((job.output_dir / "metrics.json").read_text())["train_loss"] for job in (steady, second)]
    print(f"[relaunch, transformers 4.28] train_loss uninterrupted {losses[0]:.5f}, relaunched on 2 processes "
          f"{losses[1]:.5f} ({(losses[1] - losses[0]) / losses[0]:+.2%})")
    assert losses[0] < 0.67  # it learned something (chance is 0.69): the comparison means something
    assert losses[1] == pytest.approx(losses[0], rel=0.02)


def test_roberta_mnli_arguments_as_sent_to_sagemaker_parse_on_transformers_4(
    python4: Path, moto_aws_module: Any, tmp_path: Path
) -> None:
    from tests.support.moto_server import CallRecorder, plan_for, sagemaker_backend

    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws_module, moto_aws_module.boto_session(recorders=[recorder]))
    backend.launch("mp-args-1", plan_for("roberta-mnli", "mp-args"))
    sent = recorder.by_name("mp-args-1")["HyperParameters"]
    assert "mp_parameters" in sent
    folder = JobFolder(tmp_path, "mp-args-1")
    local_container.write_container_config(folder, hyperparameters={}, channels={}, entry_point="x.py",
                                           instance_type="ml.p3.16xlarge", processes=1, keep_free_bytes=0)
    (folder.config_dir / "hyperparameters.json").write_text(json.dumps(sent))  # exactly what SageMaker got
    probe = ("import json, sys; from sagemaker_training import environment; import script_arguments; "
             "argv = environment.Environment().to_cmd_args(); "
             "s, t = script_arguments.parse_args(argv, prog='train_classification.py'); "
             "print(json.dumps({'argv': argv, 'mp': t.mp_parameters, 'model': s.model_name_or_path}))")
    env = {**base_environment(str(python4)), "SAGEMAKER_BASE_DIR": str(folder.path), "PYTHONPATH": str(TRAINING_DIR)}
    done = subprocess.run([str(python4), "-c", probe], cwd=TRAINING_DIR, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert "--mp_parameters" in parsed["argv"] and parsed["model"] == "roberta-large"
    mp = parsed["argv"][parsed["argv"].index("--mp_parameters") + 1]
    assert parsed["mp"] == mp  # TrainingArguments.mp_parameters holds what the toolkit passed, as text
    for key in ("microbatches", "placement_strategy", "pipeline", "optimize", "partitions", "ddp"):
        assert key in mp
