"""Issue 34 item 3: the host reads what a job made without following its links, opening its FIFOs or devices, or
reading without end; a job writes only the folders it needs; a model folder is checked before it is served, and
the local endpoint server runs in the jobs' sandbox.

Teams' scripts (own code launched with the installed `trainbot launch` onto the local backend, run by the toolkit
in the real bwrap sandbox) leave what the attacker of the issue left: a FIFO at output/data/metrics.json (it hung
the watcher and every bot on that home for good), a link from it to /dev/zero (`trainbot status` grew to 2.9 GB),
links to another team's metrics and model (reported and served as the attacker's own), and an attempt to swap
output/data for a link. The bot then reads them the ways it does: `trainbot status` as a process (bounded in time
and memory here, so the test machine survives the old behaviour), the backend a restarted bot builds, and
`/deploy` on the local endpoints.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.backends.local.endpoints import LocalEndpoints
from jobs.backends.local.offline_assets import LocalAssets
from jobs.backends.local.runtime import Runtime
from jobs.clock import SystemClock
from jobs.endpoints.port import DeployRequest
from jobs.errors import BackendError
from jobs.records import RemoteStatus
from tests.security.cli import TRAINBOT
from tests.security.job_rig import TeamJobs
from tests.support.waiting import wait_for

STATUS_TIMEOUT_S = 60
STATUS_MEMORY = 1 << 30  # what `trainbot status` may map: the old reader of /dev/zero died past it

VICTIM = '''\
import json, os
model = os.environ["SM_MODEL_DIR"]
json.dump({"accuracy": 0.987654}, open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "metrics.json"), "w"))
json.dump({"model_type": "bert"}, open(os.path.join(model, "config.json"), "w"))
open(os.path.join(model, "model.safetensors"), "wb").write(b"the victim's weights")
'''

LINKER = '''\
import os
victim = {victim!r}  # the other team's job folder: the same absolute path on the host
data, model = os.environ["SM_OUTPUT_DATA_DIR"], os.environ["SM_MODEL_DIR"]

def say(what, detail):
    print(f"[probe] {{what}}: {{detail}}", flush=True)

os.symlink(os.path.join(victim, "output", "data", "metrics.json"), os.path.join(data, "metrics.json"))
for name in ("config.json", "model.safetensors"):
    os.symlink(os.path.join(victim, "model", name), os.path.join(model, name))
output = os.path.dirname(data)
try:
    open(os.path.join(output, "beside-data.txt"), "w").write("x")
    say("wrote", "beside-data.txt")
except OSError as exc:
    say("refused", f"beside-data.txt {{exc.strerror}}")
try:
    os.rename(data, data + "-moved")
    os.symlink(os.path.join(victim, "output", "data"), data)
    say("swapped", "output/data")
except OSError as exc:
    say("refused", f"swap {{exc.strerror}}")
'''

FIFO = '''\
import json, os
data, model = os.environ["SM_OUTPUT_DATA_DIR"], os.environ["SM_MODEL_DIR"]
os.mkfifo(os.path.join(data, "metrics.json"))
json.dump({"model_type": "bert"}, open(os.path.join(model, "config.json"), "w"))
os.mkfifo(os.path.join(model, "tokenizer.json"))
'''

ZERO = '''\
import os
os.symlink("/dev/zero", os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "metrics.json"))
'''


@dataclass
class Left:
    rig: TeamJobs
    jobs: dict[str, str]  # what it left -> the job


@pytest.fixture(scope="module")
def left(tmp_path_factory: pytest.TempPathFactory, image_runtime: Runtime) -> Iterator[Left]:
    rig = TeamJobs.at(tmp_path_factory.mktemp("job-files"))
    victim = rig.launch("victim", VICTIM)
    jobs = {"victim": victim}
    jobs["links"] = rig.launch("linker", LINKER.format(victim=str(rig.folder(victim))))
    jobs["fifo"] = rig.launch("fifo", FIFO)
    jobs["zero"] = rig.launch("zero", ZERO)
    for job in jobs.values():
        assert rig.wait(job).status is RemoteStatus.COMPLETED, rig.log(job)[-3000:]
    yield Left(rig, jobs)


def status(rig: TeamJobs, job: str) -> subprocess.CompletedProcess[str]:
    """`trainbot status JOB --json` as a person runs it, within STATUS_TIMEOUT_S and STATUS_MEMORY."""
    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (STATUS_MEMORY * 2, STATUS_MEMORY * 2))

    lineage = job.rsplit("-", 1)[0]
    return subprocess.run([str(TRAINBOT), "status", lineage, "--json"], env=rig.env(), capture_output=True,
                          text=True, timeout=STATUS_TIMEOUT_S, preexec_fn=bounded, check=False)


def test_a_fifo_for_metrics_neither_hangs_the_cli_nor_a_restarted_bot(left: Left) -> None:
    job = left.jobs["fifo"]
    done = status(left.rig, job)  # the old reader opened the FIFO and waited for a writer for ever
    assert done.returncode == 0, done.stderr
    assert "metrics.json" not in json.dumps(left.rig.backend().describe(job).final_metrics)


def test_a_link_to_dev_zero_is_not_read(left: Left) -> None:
    done = status(left.rig, left.jobs["zero"])  # the old reader read /dev/zero until memory ran out
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_link_to_another_jobs_metrics_is_not_reported_as_the_jobs_own(left: Left) -> None:
    backend = left.rig.backend()
    assert backend.describe(left.jobs["victim"]).final_metrics.get("accuracy") == pytest.approx(0.987654)
    assert "accuracy" not in backend.describe(left.jobs["links"]).final_metrics
    assert "0.987654" not in status(left.rig, left.jobs["links"]).stdout


def test_the_job_writes_output_data_only_and_cannot_swap_it(left: Left) -> None:
    job = left.jobs["links"]
    refused = left.rig.said(job, "refused")
    assert any(line.startswith("swap ") for line in refused), left.rig.log(job)[-2000:]
    output = left.rig.folder(job) / "output"
    assert (output / "data").is_dir() and not (output / "data").is_symlink()
    assert sorted(p.name for p in output.iterdir()) == ["data"]  # what it wrote beside data stayed inside


@pytest.mark.parametrize(("what", "why"), [("links", "a link"), ("fifo", "a FIFO")])
def test_a_model_folder_of_links_or_fifos_is_not_served(left: Left, what: str, why: str) -> None:
    endpoints = LocalEndpoints(left.rig.home, SystemClock())
    model = left.rig.folder(left.jobs[what]) / "model"
    with pytest.raises(BackendError) as refused:
        endpoints.deploy(_request(f"ep-{what}", model))
    assert why in refused.value.user_message() and "regular files only" in refused.value.user_message()
    assert not (left.rig.home / "local-endpoints" / f"ep-{what}").exists()  # nothing was started


def test_the_endpoint_server_runs_in_the_sandbox_on_a_checked_copy(tmp_path: Path, local_assets: LocalAssets) -> None:
    home = tmp_path / "home"
    model = home / "local-jobs" / "trained-1" / "model"
    shutil.copytree(local_assets.model_dir, model)
    (home / "trainbot.db").write_text("the store")
    endpoints = LocalEndpoints(home, SystemClock())
    endpoints.deploy(_request("served", model))
    try:
        wait_for(lambda: endpoints.describe("served").status != "Creating", "the endpoint")
        assert endpoints.describe("served").status == "InService", endpoints.describe("served").failure_reason
        server = _server_process(home / "local-endpoints" / "served")
        uid = int(Path(f"/proc/{server}/status").read_text().split("Uid:")[1].split()[0])
        assert uid != 0 and uid == (65534 if os.geteuid() == 0 else os.getuid())
        assert os.readlink(f"/proc/{server}/ns/user") != os.readlink("/proc/self/ns/user")
        view = Path(f"/proc/{server}/root")  # the file system as the server sees it
        assert not (view / str(home / "trainbot.db").lstrip("/")).exists()
        assert not (view / str(model).lstrip("/")).exists()  # the job's own folder: not there
        served = home / "local-endpoints" / "served" / "models" / "served"
        assert (view / str(served / "config.json").lstrip("/")).is_file()
        answer = endpoints.invoke("served", {"inputs": {"question": "What is it?", "context": "It is a test."}})
        assert "answer" in answer
    finally:
        endpoints.delete("served")


def _server_process(folder: Path) -> int:
    """The endpoint's Python (the sandbox's last process whose command line names the server module)."""
    found = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _runs_server(p, folder)]
    assert found, "no endpoint server process"
    return max(found)


def _runs_server(proc: Path, folder: Path) -> bool:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and not argv[0].endswith(b"bwrap") and str(folder).encode() in b" ".join(argv) and \
        b"jobs.backends.local.endpoint_server" in argv


def _request(name: str, model: Path) -> DeployRequest:
    return DeployRequest(name=name, model_name=f"{name}-1", model_data=str(model), task="question-answering",
                         framework=None, instance_type="local", instance_count=1)
