"""The local backend against real processes training the tiny BERT (no mocked trainer).

One data-parallel QA job (two torchrun workers) is shared by several tests through a module fixture,
so the suite pays for its start-up once; the spot and failure tests run their own jobs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobs.backends.local.limits import JobLimits, machine_cgroups
from jobs.backends.local.offline_assets import LocalAssets
from jobs.backends.local.runner import SubprocessRunner
from jobs.backends.local.sandbox import Sandbox
from jobs.backends.local.scaling import LocalLimits, script_arguments
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import BadInput, InvalidState, NotFound
from jobs.planning.grammar import parse_command
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.records import RemoteJob, RemoteStatus
from tests.support.assets import seed_assets
from tests.support.clock import FakeClock
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(900)  # two jobs in a row on a busy 2-core machine


class RecordingRunner(SubprocessRunner):
    """The real runner, which also keeps what it was asked to start (argv, env)."""

    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[tuple[list[str], dict[str, str]]] = []

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> int:
        self.spawned.append((list(argv), dict(env)))
        return super().spawn(argv, env=env, cwd=cwd, log_path=log_path)


def plan_for(text: str, lineage: str) -> LaunchPlan:
    return build_plan(parse_command(text), bucket="test-bucket", lineage_id=lineage)


def wait_terminal(backend: LocalBackend, job: str) -> RemoteJob:
    result: list[RemoteJob] = []

    def ended() -> bool:
        result[:] = [backend.describe(job)]
        return result[0].status.is_terminal()

    try:
        wait_for(ended, f"{job} to end", every=0.5)
    except AssertionError:
        raise AssertionError(
            f"{job} did not end; log tail:\n" + "\n".join(backend.log_tail(job, 30))
        ) from None
    return result[0]


@pytest.fixture
def home(local_home: Path) -> Path:
    """A fresh home with the session's tiny BERT and generated data (the backend reuses a READY set)."""
    return local_home


#: Secrets the bot holds; a job's processes must never see them (issue 12, item 2).
CANARY = "canary-secret-7d1f"
BOT_SECRETS = {
    "SLACK_BOT_TOKEN": f"xoxb-{CANARY}",
    "SLACK_SIGNING_SECRET": CANARY,
    "AWS_SECRET_ACCESS_KEY": CANARY,
    "AWS_ACCESS_KEY_ID": "AKIA" + CANARY,
    "TRAINBOT_DATABASE_URL": f"postgresql://bot:{CANARY}@db/trainbot",
}


def process_tree(pid: int) -> list[int]:
    """`pid` and every process under it, found through /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def environments(pid: int) -> dict[int, dict[str, str]]:
    """The environment of every process in `pid`'s tree, as /proc/<pid>/environ holds it."""
    found = {}
    for member in process_tree(pid):
        try:
            raw = Path(f"/proc/{member}/environ").read_bytes()
        except OSError:
            continue
        found[member] = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
    return found


@dataclass
class QaRun:
    home: Path
    first: LocalBackend
    runner: RecordingRunner
    plan: LaunchPlan
    remote: RemoteJob
    log: str
    running_environments: dict[int, dict[str, str]]


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory: pytest.TempPathFactory, local_assets: LocalAssets) -> Iterator[QaRun]:
    home = seed_assets(tmp_path_factory.mktemp("qa-home"), local_assets)
    runner = RecordingRunner()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in BOT_SECRETS.items():  # the bot's own environment holds secrets
            patch.setenv(name, value)
        first = LocalBackend(home, clock=SystemClock(), runner=runner, offline=True)
        plan = plan_for("bert-squad", "qa1")
        first.launch("qa1-1", plan)
    first.launch("qa1-1", plan)  # a retried launch
    LocalBackend(home, clock=SystemClock(), offline=True).launch("qa1-1", plan)  # from another bot process
    pid = json.loads((home / "local-jobs" / "qa1-1" / "state.json").read_text())["pid"]
    running: dict[int, dict[str, str]] = {}
    progress = home / "local-jobs" / "qa1-1" / "logs" / "train.log"
    # Read while it trains: the wrapper, `train`, torchrun and both workers.
    wait_for(lambda: "[progress]" in progress.read_text(), "its first progress line")
    running.update(environments(pid))
    # Watched to the end by a different instance, as a restarted bot would.
    remote = wait_terminal(LocalBackend(home, clock=SystemClock(), offline=True), "qa1-1")
    log = progress.read_text()
    yield QaRun(home, first, runner, plan, remote, log, running)


def test_data_parallel_qa_job_completes_with_exact_match_and_f1(qa_run: QaRun) -> None:
    remote = qa_run.remote
    assert remote.status is RemoteStatus.COMPLETED, remote.failure_reason
    assert remote.secondary_status == "Completed"
    assert {"eval_exact_match", "eval_f1"} <= remote.final_metrics.keys()
    assert 0 <= remote.final_metrics["eval_exact_match"] <= remote.final_metrics["eval_f1"] <= 100
    assert remote.model_artifacts is not None
    assert (Path(remote.model_artifacts) / "model.safetensors").is_file()
    assert [t.status for t in remote.transitions][0] == "Starting"
    assert [t.status for t in remote.transitions][-1] == "Completed"
    assert remote.training_seconds and remote.billable_seconds == remote.training_seconds  # on-demand
    # Two torchrun workers really shared the data (DDP over gloo), not two independent runs.
    assert "[shard] rank=0 world_size=2" in qa_run.log
    assert "[shard] rank=1 world_size=2" in qa_run.log


def test_job_runs_through_the_training_toolkit_as_the_image_does(qa_run: QaRun) -> None:
    ((argv, env),) = qa_run.runner.spawned
    job = qa_run.home / "local-jobs" / "qa1-1"
    assert argv[-1].endswith("/train")  # the image's entry point, under the exit-code wrapper
    assert env["SAGEMAKER_TRAINING_MODULE"] == "sagemaker_pytorch_container.training:main"
    assert env["SAGEMAKER_BASE_DIR"] == str(job)  # the job's own /opt/ml tree
    hps = {k: json.loads(v) for k, v in json.loads((job / "input/config/hyperparameters.json").read_text()).items()}
    assert hps["sagemaker_program"] == "train_qa.py" and Path(hps["sagemaker_submit_directory"]).name == "sourcedir.tar.gz"
    assert hps["max_steps"] == 60 and hps["fp16"] is False and hps["pad_to_max_length"] is True
    checkpoint_dir = qa_run.home / "checkpoints" / "test-bucket" / "trainbot" / "qa1" / "checkpoints"
    assert hps["checkpoint_dir"] == str(checkpoint_dir)
    assert (job / "input/data/train/squad.jsonl").is_file() and (job / "input/data/test").is_dir()
    # The toolkit itself turned them into the script's environment and arguments, and swapped
    # smdistributed data parallel for its torchrun launcher on the CPU.
    assert "Starting distributed training through torchrun" in qa_run.log
    assert "torchrun --nnodes 1 --nproc_per_node 2 train_qa.py" in qa_run.log
    assert "Installing dependencies from requirements.txt" in qa_run.log  # requirements.txt honoured
    assert "Reporting training SUCCESS" in qa_run.log and (job / "output/data/metrics.json").is_file()
    # The toolkit's success file went to the sandbox's own output/ (a tmpfs): of output/ only data/ is the job's.
    assert sorted(p.name for p in (job / "output").iterdir()) == ["data"]
    workers = [e for e in qa_run.running_environments.values() if e.get("SM_CHANNEL_TRAIN")]
    assert workers and all(e["SM_MODEL_DIR"] == str(job / "model") for e in workers)
    assert all(e["SM_CHANNEL_TRAIN"] == str(job / "input/data/train") for e in workers)


def test_no_process_of_a_running_job_sees_the_bots_secrets(qa_run: QaRun) -> None:
    ((_, env),) = qa_run.runner.spawned
    assert len(qa_run.running_environments) >= 4  # wrapper, train, torchrun, two workers (at least)
    for pid, seen in qa_run.running_environments.items():
        leaked = {k for k, v in seen.items() if CANARY in v}
        assert not leaked, f"pid {pid} sees {sorted(leaked)}"
        assert not {k for k in seen if k.startswith(("SLACK_", "AWS_", "TRAINBOT_"))}, pid
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] and env["HOME"]


def test_launching_one_name_twice_starts_one_process(qa_run: QaRun) -> None:
    assert len(qa_run.runner.spawned) == 1
    assert qa_run.log.count("[trainbot] training process exited") == 1
    assert qa_run.log.count("[shard] rank=0") == 1


def test_a_new_backend_instance_describes_the_job(qa_run: QaRun) -> None:
    fresh = LocalBackend(qa_run.home, clock=SystemClock(), offline=True)
    remote = fresh.describe("qa1-1")
    assert remote.status is RemoteStatus.COMPLETED
    assert remote.final_metrics == qa_run.remote.final_metrics
    assert [s.name for s in fresh.list_changed(None)] == ["qa1-1"]
    assert fresh.list_changed(remote.last_modified) == []


def test_metric_series_progress_and_links(qa_run: QaRun) -> None:
    series = qa_run.first.metric_series("qa1-1")
    steps = [p.x for p in series["loss"]]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) >= 5
    assert series["eval_f1"][-1].value == pytest.approx(qa_run.remote.final_metrics["eval_f1"], abs=1e-3)
    assert qa_run.first.job_progress("qa1-1") == pytest.approx(
        {"step": 60, "max_steps": 60, "loss": series["loss"][-1].value, "eta_s": 0.0}, abs=1e-3
    )
    found = qa_run.first.progress(["qa1-1", "never-launched-1"])  # the port: many jobs at once
    assert list(found) == ["qa1-1"]
    assert (found["qa1-1"].step, found["qa1-1"].max_steps, found["qa1-1"].eta_seconds) == (60, 60, 0.0)
    assert found["qa1-1"].loss == pytest.approx(series["loss"][-1].value, abs=1e-3)
    links = qa_run.first.console_links("qa1-1")
    assert Path(links["log"]).is_file() and Path(links["model"]).is_dir()
    assert qa_run.first.log_tail("qa1-1", 3)[-1] == "[trainbot] training process exited with code 0"


def test_stopping_an_ended_job_says_so(qa_run: QaRun) -> None:
    with pytest.raises(InvalidState, match="already ended"):
        qa_run.first.stop("qa1-1")


def test_spot_job_loses_capacity_then_the_next_attempt_resumes(home: Path) -> None:
    # The default scale-down: 60 steps, a checkpoint every 10, so the reclaim lands mid-run.
    backend = LocalBackend(home, clock=SystemClock(), offline=True)
    plan = plan_for("distilbert-spot", "spot1")
    checkpoints = backend.checkpoint_folder(plan.estimator["checkpoint_s3_uri"])
    backend.launch("spot1-1", plan)
    wait_for(lambda: any(checkpoints.glob("checkpoint-*/trainer_state.json")), "a whole checkpoint", every=0.05)
    furthest = checkpoints / "trainbot-furthest-step.json"
    wait_for(lambda: furthest.is_file() and json.loads(furthest.read_text())["step"] % 10 > 0,
             "a step past the checkpoint", every=0.05)
    backend.take_capacity("spot1-1")  # SIGKILL: nothing the script can act on

    first = wait_terminal(backend, "spot1-1")
    assert (first.status, first.secondary_status) == (RemoteStatus.STOPPED, "MaxWaitTimeExceeded")
    assert "Interrupted" in [t.status for t in first.transitions]
    assert first.failure_reason == ""
    assert first.billable_seconds is not None and first.training_seconds is not None
    assert first.billable_seconds < first.training_seconds  # spot bills a fraction
    log = "\n".join(backend.log_tail("spot1-1", 200))
    assert "SIGTERM" not in log and "interrupted: saved" not in log  # no save at the kill
    saved = max(int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/trainer_state.json"))
    reached = json.loads(furthest.read_text())["step"]
    assert 10 <= saved <= reached < 60

    backend.launch("spot1-2", plan)  # the watcher's relaunch: same lineage, same checkpoint URI
    second = wait_terminal(backend, "spot1-2")
    assert second.status is RemoteStatus.COMPLETED, second.failure_reason
    assert backend.resumed_from_step("spot1-2") == saved
    assert second.resumed_from_step == saved  # what the watcher mirrors into the attempt's report
    assert second.steps_redone == backend.steps_redone("spot1-2") == reached - saved  # the work the kill cost
    assert "eval_accuracy" in second.final_metrics
    assert backend.metric_series("spot1-2")["loss"][0].x > saved  # the resumed run starts after the checkpoint


def test_stopping_a_data_parallel_job_ends_it_stopped_after_a_save(home: Path) -> None:
    backend = LocalBackend(home, clock=SystemClock(), offline=True, limits=LocalLimits(max_steps=100))
    plan = plan_for("bert-squad max_steps=100", "stop1")
    checkpoints = backend.checkpoint_folder(plan.estimator["checkpoint_s3_uri"])
    backend.launch("stop1-1", plan)
    wait_for(lambda: any(checkpoints.glob("checkpoint-*/trainer_state.json")), "a whole checkpoint")
    backend.stop("stop1-1")
    assert backend.describe("stop1-1").status in (RemoteStatus.STOPPING, RemoteStatus.STOPPED)
    remote = wait_terminal(backend, "stop1-1")
    assert (remote.status, remote.secondary_status) == (RemoteStatus.STOPPED, "Stopped")
    assert [t.status for t in remote.transitions][-2:] == ["Stopping", "Stopped"]
    assert remote.failure_reason == "" and remote.model_artifacts is None
    # Both torchrun workers got the SIGTERM and agreed on one step to save at.
    assert any("[checkpoint] interrupted: saved step" in line for line in backend.log_tail("stop1-1", 200))


def test_a_job_past_max_run_is_stopped_on_the_injected_clock(home: Path) -> None:
    clock = FakeClock()
    # A run far longer than the test: on a loaded machine a 60-step job could end on its own before the
    # fake clock passes max_run, and this test is about the stop, not about training.
    backend = LocalBackend(home, clock=clock, offline=True, limits=LocalLimits(max_steps=100_000))
    backend.launch("slow1-1", plan_for("distilbert-spot max_run=1000 max_steps=100000", "slow1"))
    # Training first: a SIGTERM while the process is still starting ends it before it can save or say so.
    wait_for(lambda: backend.describe("slow1-1").secondary_status == "Training", "slow1-1 to train")
    clock.advance(999)
    assert backend.describe("slow1-1").status is RemoteStatus.IN_PROGRESS
    clock.advance(2)  # past max_run: the next look sends SIGTERM, as SageMaker stops such a job
    assert backend.describe("slow1-1").secondary_status == "Stopping"
    remote = wait_terminal(backend, "slow1-1")
    assert (remote.status, remote.secondary_status) == (RemoteStatus.STOPPED, "MaxRuntimeExceeded")
    assert remote.created_at == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert remote.last_modified == remote.created_at + timedelta(seconds=1001)


def test_bad_hyperparameter_fails_with_an_algorithm_error(home: Path) -> None:
    backend = LocalBackend(home, clock=SystemClock(), offline=True)
    backend.launch("bad1-1", plan_for("distilbert-spot spot=no lr_scheduler_type=sideways", "bad1"))
    remote = wait_terminal(backend, "bad1-1")
    assert remote.status is RemoteStatus.FAILED
    assert remote.failure_reason.startswith("AlgorithmError: ")
    assert "sideways" in remote.failure_reason
    with pytest.raises(InvalidState, match="not a spot job|already ended"):
        backend.take_capacity("bad1-1")


def test_unknown_jobs_and_bad_names(trainbot_home: Path) -> None:
    backend = LocalBackend(trainbot_home, clock=SystemClock(), offline=True)
    with pytest.raises(NotFound, match="no-such-job"):
        backend.describe("no-such-job")
    for call in (backend.stop, backend.log_tail, backend.metric_series, backend.job_progress):
        with pytest.raises(NotFound):
            call("no-such-job")
    assert backend.progress(["no-such-job"]) == {}  # the port over many jobs: unknown ones have none
    with pytest.raises(BadInput, match="not valid"):
        backend.launch("../escape", plan_for("bert-squad", "x"))
    assert backend.list_changed(None) == []


TOOLKIT_NOTE = "runner: sagemaker-training toolkit (the training image's `train`)"


def test_scaling_note_says_what_runs_locally(trainbot_home: Path) -> None:
    offline = LocalBackend(trainbot_home, clock=SystemClock(), offline=True, sandbox=Sandbox("off"))
    limits = JobLimits.defaults().describe(machine_cgroups()[0])
    unsandboxed = f"isolation: none (TRAINBOT_LOCAL_SANDBOX=off), the job runs with this user's rights; {limits}"
    assert offline.scaling_note(plan_for("bert-squad", "n1")) == (
        "local: tiny BERT, 200 generated examples, 60 steps, 2 processes; smdistributed data parallel runs as"
        f" torchrun DDP (gloo); fp16 off on the CPU; {TOOLKIT_NOTE}; {unsandboxed}"
    )
    assert "smdistributed model parallel runs as torchrun DDP (gloo)" in (
        offline.scaling_note(plan_for("roberta-mnli", "n2")) or ""
    )
    assert offline.scaling_note(plan_for("distilbert-spot", "n3")) == (
        f"local: tiny BERT, 200 generated examples, 60 steps, 1 process; {TOOLKIT_NOTE}; {unsandboxed}"
    )
    online = LocalBackend(trainbot_home, clock=SystemClock(), offline=False, use_toolkit=False)
    isolation = ("isolation: bwrap sandbox (own PIDs, host network for the hub, writes only its own folders)"
                 if Sandbox().problem() is None else f"isolation: none ({Sandbox().problem()}), the job runs with this user's rights")
    isolation = f"{isolation}; {limits}"
    assert online.scaling_note(plan_for("distilbert-spot", "n4")) == (
        "local: distilbert-base-uncased, dataset imdb from the hub, 60 steps, 1 process;"
        f" runner: direct (sagemaker-training is not installed here); {isolation}"
    )
    assert not (trainbot_home / "assets").exists()  # a plan card builds nothing


def test_checkpoint_folders_follow_the_uri(trainbot_home: Path) -> None:
    backend = LocalBackend(trainbot_home, clock=SystemClock(), offline=True)
    one = backend.checkpoint_folder("s3://b/trainbot/lin-a/checkpoints")
    assert one == trainbot_home / "checkpoints" / "b" / "trainbot" / "lin-a" / "checkpoints"
    assert backend.checkpoint_folder("s3://b/trainbot/lin-a/checkpoints") == one
    assert backend.checkpoint_folder("s3://b/trainbot/lin-b/checkpoints") != one
    assert trainbot_home in backend.checkpoint_folder("s3://b/../../etc").parents


def test_a_plan_made_without_a_bucket_checkpoints_into_a_plain_folder(trainbot_home: Path) -> None:
    backend = LocalBackend(trainbot_home, clock=SystemClock(), offline=True)
    uri = "s3://<TRAINBOT_BUCKET>/trainbot/lin-a/checkpoints"  # a local bot needs no TRAINBOT_BUCKET
    assert backend.checkpoint_folder(uri) == trainbot_home / "checkpoints" / "trainbot" / "lin-a" / "checkpoints"
    older = trainbot_home / "checkpoints" / "_TRAINBOT_BUCKET_" / "trainbot" / "lin-b" / "checkpoints"
    older.mkdir(parents=True)  # a lineage that saved before: it resumes from where it saved
    assert backend.checkpoint_folder(uri.replace("lin-a", "lin-b")) == older


def test_hyperparameters_are_passed_as_sagemaker_does() -> None:
    assert script_arguments({"do_train": True, "fp16": False, "lr": 3e-05, "steps": 60, "name": "a b"}) == [
        "--do_train",
        "True",
        "--fp16",
        "False",
        "--lr",
        "3e-05",
        "--steps",
        "60",
        "--name",
        "a b",
    ]


def test_the_direct_runner_trains_a_local_train_data_folder_on_the_default_offline_setup(home: Path) -> None:
    """Where the toolkit cannot run, the direct runner: same tree, channels, SM_* variables and arguments.
    The data is the person's own folder (string labels), the model the offline tiny BERT. Two instances, so
    two processes under torchrun --standalone, inside the sandbox where bwrap works: its rendezvous is
    advertised under the sandbox's host name, which must resolve there."""
    from jobs.backends.local.offline_assets import write_imdb_jsonl

    data = home / "data" / "reviews"
    write_imdb_jsonl(data / "train", 200, seed=11)
    write_imdb_jsonl(data / "test", 50, seed=12)
    runner = RecordingRunner()
    backend = LocalBackend(home, clock=SystemClock(), runner=runner, offline=True, use_toolkit=False,
                           limits=LocalLimits(max_processes=2))
    text = f"task=text-classification model=distilbert-base-uncased train_data={data} instance_count=2 distribution=ddp"
    plan = plan_for(text, "own1")
    note = backend.scaling_note(plan) or ""
    assert "runner: direct" in note and "2 processes" in note
    backend.launch("own1-1", plan)
    remote = wait_terminal(backend, "own1-1")
    assert remote.status is RemoteStatus.COMPLETED, remote.failure_reason
    assert "eval_accuracy" in remote.final_metrics
    ((argv, env),) = runner.spawned
    assert argv[argv.index("--nproc_per_node") + 1] == "2"
    assert any(Path(word).name == "bwrap" for word in argv) == (Sandbox().problem() is None)  # sandboxed where it can be
    job = home / "local-jobs" / "own1-1"
    assert str(job / "code" / "train_classification.py") in argv[argv.index("--"):]  # unpacked sourcedir
    assert env["SM_CHANNEL_TRAIN"] == str(job / "input/data/train")
    channel, source = job / "input/data/train", data / "train"  # a copy, as File mode downloads it
    assert not channel.is_symlink() and sorted(p.name for p in channel.iterdir()) == sorted(p.name for p in source.iterdir())
    config = json.loads((Path(remote.model_artifacts or "") / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}  # the data's label names, kept
