"""The local backend's side of own code (issue 23), without training: the image runtime builder (its pip calls,
its cache, its one-sentence failure), the plan card's note (the runtime named, half precision warned of), a
script's fp16 refusal turned into one sentence, the loss curve at real steps, and `trainbot capacity` refusals.
The real runtime build and real training are tests/support/runtimes.py and tests/bot/test_own_scripts_local_e2e.py."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local import status as local_status
from jobs.backends.local.runtime import ImageRuntimes
from jobs.backends.local.state import JobFolder, JobState
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import BackendError, BadInput, PermissionDenied
from jobs.lifecycle.service import JobService
from jobs.planning.grammar import parse_command
from jobs.planning.images import image_packages
from jobs.planning.plan import build_plan
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

CODE = "code=git+https://github.com/acme/models.git@main entry=scripts/train.py"
IMAGE = image_packages("4.28.1", "2.0.0", "py310")


class FakePip:
    """Stands in for subprocess.run: records each command, makes the venv's python, fails when told."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            (Path(argv[3]) / "bin").mkdir(parents=True)
            (Path(argv[3]) / "bin" / "python").write_text("")
        if self.fail_on and self.fail_on in " ".join(argv):
            return subprocess.CompletedProcess(argv, 1, "", "WARNING: x\nERROR: No matching distribution found for datasets==2.15.0\n")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_a_runtime_is_built_once_torch_first_then_the_images_packages(tmp_path: Path) -> None:
    assert IMAGE is not None
    pip = FakePip()
    runtimes = ImageRuntimes(tmp_path, base_python="/usr/bin/python3", run=pip)
    runtime = runtimes.ensure(IMAGE)
    assert [c[1:3] for c in pip.calls] == [["-m", "venv"], ["-m", "pip"], ["-m", "pip"], ["-m", "pip"]]
    assert pip.calls[3][3:5] == ["freeze", "--all"]  # what a lock of this image is made from
    assert pip.calls[1][-1] == "torch==2.13.0"  # alone and first: an open range pulls a CUDA build
    assert {"transformers==4.28.1", "datasets==2.15.0", "evaluate==0.4.0", "accelerate==0.19.0",
            "scikit-learn==1.2.2", "sagemaker-training>=5,<6"} <= set(pip.calls[2])
    # The image's lock (every package of an earlier build, data/runtime_locks/) constrains the install: no drift.
    constraints = Path(pip.calls[2][pip.calls[2].index("-c") + 1])
    locked = set(constraints.read_text().split())
    assert {"transformers==4.28.1", "tokenizers==0.13.3", "huggingface-hub==0.19.4", "numpy==1.26.4"} <= locked
    assert not [line for line in locked if line.startswith(("torch==", "pip=="))]  # the CPU torch is pinned alone
    assert IMAGE.lock and set(IMAGE.lock) == locked
    assert runtime.python == tmp_path.resolve() / "runtimes" / IMAGE.key / "bin" / "python"
    assert runtime.environment() == {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}  # the image's torch 2.0 did so
    runtimes.ensure(IMAGE)
    assert len(pip.calls) == 4  # cached: nothing is installed again


def test_a_failed_build_leaves_nothing_and_says_pips_reason(tmp_path: Path) -> None:
    assert IMAGE is not None
    runtimes = ImageRuntimes(tmp_path, run=FakePip(fail_on="datasets==2.15.0"))
    with pytest.raises(BackendError) as caught:
        runtimes.ensure(IMAGE)
    assert caught.value.message == ("Could not build the transformers 4.28.1 runtime, as the training image: "
                                    "No matching distribution found for datasets==2.15.0")
    assert not runtimes.path(IMAGE).exists() and not runtimes.is_built(IMAGE)


class InstallingPip(FakePip):
    """FakePip whose install of the image's packages writes ``files`` (relative to the venv) into the venv."""

    def __init__(self, files: dict[str, str]) -> None:
        super().__init__()
        self.files = files

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] == ["-m", "pip", "install"] and any(a.startswith("transformers==") for a in argv):
            venv = Path(argv[0]).parent.parent
            for relative, text in self.files.items():
                (venv / relative).parent.mkdir(parents=True, exist_ok=True)
                (venv / relative).write_text(text)
        return super().__call__(argv, **kwargs)


def test_a_second_runtime_shares_the_files_it_has_in_common_with_the_first(tmp_path: Path) -> None:
    newest = image_packages("5.3.0", "2.9.0", "py312")
    assert IMAGE is not None and newest is not None
    site = "lib/python3.11/site-packages"
    first = ImageRuntimes(tmp_path, base_python="/usr/bin/python3",
                          run=InstallingPip({f"{site}/torch/big.so": "torch" * 1000, f"{site}/a/x.py": "one"}))
    first.ensure(IMAGE)
    second = ImageRuntimes(tmp_path, base_python="/usr/bin/python3",
                           run=InstallingPip({f"{site}/torch/big.so": "torch" * 1000, f"{site}/a/x.py": "two"}))
    second.ensure(newest)
    old, new = first.path(IMAGE), second.path(newest)
    assert (new / site / "torch" / "big.so").samefile(old / site / "torch" / "big.so")
    assert (new / site / "a" / "x.py").read_text() == "two" and (old / site / "a" / "x.py").read_text() == "one"
    assert second.is_built(newest)


def test_a_runtime_shares_what_it_has_in_common_with_the_bots_own_environment() -> None:
    assert IMAGE is not None
    own = Path(pytest.__file__)  # a file of the environment the tests (the bot) run in
    relative = own.relative_to(Path(sys.prefix))
    before = own.read_bytes()
    # A home on the venv's own file system (a hard link cannot cross one; the temp folder may be elsewhere).
    with tempfile.TemporaryDirectory(dir=sys.prefix, prefix=".trainbot-test-home-") as home:
        runtimes = ImageRuntimes(Path(home), base_python=sys.executable,
                                 run=InstallingPip({str(relative): before.decode()}))
        runtimes.ensure(IMAGE)
        assert (runtimes.path(IMAGE) / relative).samefile(own)
    assert own.read_bytes() == before


def test_every_image_the_sdk_knows_has_a_row(tmp_path: Path) -> None:
    from jobs.planning.versions import training_combinations

    for combo in training_combinations():
        assert image_packages(*combo.as_tuple()) is not None, combo
    # An image whose packages have no build for this machine's Python says so before pip is asked anything.
    pip = FakePip()
    with pytest.raises(BadInput, match="transformers 4.17.0 needs tokenizers<0.13, which has no build for this"):
        ImageRuntimes(tmp_path, run=pip).for_spec(parse_command(f"{CODE} transformers_version=4.17.0"))
    assert pip.calls == []


def test_the_card_names_the_runtime_and_warns_of_half_precision(tmp_path: Path) -> None:
    spec = parse_command(f"{CODE} hp.fp16=yes hp.model_id=m").model_copy(update={"code_commit": "a" * 40})
    backend = LocalBackend(tmp_path, clock=SystemClock(), runtimes=ImageRuntimes(tmp_path, run=FakePip()))
    note = backend.scaling_note(build_plan(spec, bucket="", lineage_id="l")) or ""
    assert "transformers 4.28.1 runtime, as the training image (built by the first job" in note
    assert "fp16 off on the CPU (hp.fp16=False)" in note  # the stand-in's change, said on the card
    assert "fp16" not in (backend.scaling_note(build_plan(parse_command(f"{CODE}").model_copy(
        update={"code_commit": "a" * 40}), bucket="", lineage_id="l")) or "")


def test_a_script_insisting_on_fp16_fails_with_one_sentence(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "j-1")
    folder.log_path.parent.mkdir(parents=True)
    folder.log_path.write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 61, in <module>\n"
        "ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation "
        "(`--fp16_full_eval`) can only be used on CUDA devices.\n"
        "2026-12-01 sagemaker-training-toolkit ERROR    Reporting training FAILURE\n")
    state = JobState(name="j-1", created_at=datetime.now(timezone.utc), last_modified=datetime.now(timezone.utc),
                     exit_code=1)
    assert local_status.ended_status(folder, state) == ("Failed", "Failed")
    assert state.failure_reason.startswith(
        "AlgorithmError: the script turned on fp16 (half precision), which needs a GPU, and this machine has none")


def test_the_loss_curve_is_at_the_training_steps_the_log_shows(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "job-1")
    folder.log_path.parent.mkdir(parents=True)
    folder.log_path.write_text("\n".join([
        "Map: 100%|##########| 480/480 [00:00<00:00, 3000.00 examples/s]",
        "{'loss': 0.9, 'learning_rate': 1e-3, 'epoch': 0.1}",  # before any step: left out, never at a made-up one
        "  8%|8         | 5/60 [00:01<00:11,  4.80it/s]",
        "{'loss': 0.7, 'learning_rate': 1e-3, 'epoch': 0.17}",
        "100%|##########| 2/2 [00:00<00:00, 30.00it/s]",  # an evaluation bar: eval batches, not steps
        "{'eval_loss': 0.69, 'eval_accuracy': 0.5, 'epoch': 0.5}",
        " 17%|#6        | 10/60 [00:02<00:10,  4.90it/s]",
        "{'loss': 0.6, 'learning_rate': 1e-3, 'epoch': 0.33}",
        "eval_loss = 0.41",
    ]) + "\n")
    series = local_status.metric_series(folder)
    assert [(p.x, p.value) for p in series["loss"]] == [(5.0, 0.7), (10.0, 0.6)]
    assert [(p.x, p.value) for p in series["eval_loss"]] == [(5.0, 0.69), (10.0, 0.41)]


class ReclaimableBackend(ScriptedBackend):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock, name="local")
        self.taken: list[str] = []

    def take_capacity(self, job_name: str) -> None:
        self.taken.append(job_name)


def test_trainbot_capacity_takes_a_running_spot_job_and_refuses_anything_else(tmp_path: Path) -> None:
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}", clock=clock)
    store.migrate()
    backend = ReclaimableBackend(clock)
    ids = iter(["cap-00000001", "cap-00000002"])
    service = JobService(store=store, backend=backend, clock=clock, settings=Settings(trainbot_bucket="b"),
                         new_lineage_id=lambda spec: next(ids), simulation=backend)
    alice, bob = Actor("U_ALICE", channel_id="C_ML", via="slack"), Actor("U_BOB", channel_id="C_ML", via="slack")
    service.launch("distilbert-spot spot=no", actor=alice)
    with pytest.raises(BadInput, match="not a spot job"):
        service.take_capacity("cap-00000001", actor=alice)
    service.launch("distilbert-spot", actor=alice)
    with pytest.raises(PermissionDenied):
        service.take_capacity("cap-00000002", actor=bob)
    assert service.take_capacity("cap-00000002", actor=alice).job_name == "cap-00000002-1"
    assert backend.taken == ["cap-00000002-1"]
    plain = JobService(store=store, backend=ScriptedBackend(clock=clock, name="local"), clock=clock,
                       settings=Settings(trainbot_bucket="b"))
    with pytest.raises(BadInput, match="simulated spot reclaim of the local backend"):
        plain.take_capacity("cap-00000002", actor=alice)


def test_each_lock_pins_its_rows_own_versions_and_the_buildable_images_have_one() -> None:
    from jobs.planning.images import known_images

    locked = {image.transformers: image for image in known_images() if image.lock}
    assert {"4.26.0", "4.28.1"} <= set(locked)  # the images the suite and the machine build
    for image in locked.values():
        pins = dict(line.split("==", 1) for line in image.lock)
        lowered = {name.lower().replace("_", "-"): version for name, version in pins.items()}
        for name, version in image.packages:  # a lock made from another row's build would contradict it
            assert lowered.get(name.lower()) == version, (image.key, name, version)
        assert image.local is None  # a row with a lock was built here
