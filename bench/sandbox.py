"""What the bubblewrap sandbox and the job limits add to the start of a local job, as ratios in the same run.

A team's script that only prints a line and exits (own code from a git repository made here, so the launch is
the one `/train code=...` makes) is launched again and again on the local backend, in turn:
- **unsandboxed**: no sandbox (off, as the console may run it for a bot that is not root);
- **before**: the sandbox's arguments before issue 34 (one bwrap as the bot's uid, no user namespace) and no
  limits (no cgroup, no disk watch), reconstructed here;
- **sandbox**: today's sandbox (a root bot: bwrap for the mounts, setpriv, an unprivileged bwrap with the user
  namespace; else one unprivileged bwrap), still without the limits;
- **now**: today's sandbox and limits (the job's cgroups made and removed, the wrapper's disk watch, the writable
  folders handed to the job's uid).
Each figure is the wall time from `LocalBackend.launch` to the job's recorded exit: the job folder, the code
packed and unpacked, the job's own Python environment, the wrapper, bwrap (or not), and Python starting. The
first launch of each kind warms the code cache and is not counted. The target: the sandbox and limits add under
1 s.

    PYTHONPATH=. .venv/bin/python bench/sandbox.py [--rounds 8] [--runner direct|toolkit]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobs.backends.local import sandbox as local_sandbox
from jobs.backends.local import training_jobs
from jobs.backends.local.confinement import Confinement
from jobs.backends.local.limits import JobLimits
from jobs.backends.local.sandbox import JobMounts, Sandbox
from jobs.backends.local.state import JobFolder, JobState
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.planning.reader import CommandReader
from tests.support.runtimes import link_runtimes

SCRIPT = "print('[bench] started', flush=True)\n"


def make_repository(root: Path) -> tuple[str, str]:
    """A bare repository with jobs/start.py; (its file:// URL, the commit)."""
    work, bare = root / "work", root / "bench.git"
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@trainbot.invalid", "-c", "commit.gpgsign=false"]
    (work / "jobs").mkdir(parents=True)
    (work / "jobs" / "start.py").write_text(SCRIPT)
    for args in (["init", "-q", "--bare", "-b", "main", str(bare)], ["init", "-q", "-b", "main", str(work)]):
        subprocess.run(["git", *args], cwd=root, check=True)
    for args in (["add", "-A"], ["commit", "-q", "-m", "bench"], ["push", "-q", str(bare), "HEAD:main"]):
        subprocess.run(["git", *identity, *args], cwd=work, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True, capture_output=True, text=True)
    return f"file://{bare}", commit.stdout.strip()


def plan_for(url: str, commit: str, home: Path) -> LaunchPlan:
    from jobs.backends.code_sources import GitCodeSources

    reader = CommandReader.of(max_instances=16, code_sources=(url,), resolver=GitCodeSources(home))
    spec = reader.read(f"model=bert-base-uncased dataset=imdb code=git+{url}@{commit} entry=jobs/start.py")
    return build_plan(spec, bucket="bench", lineage_id="bench")


def start_seconds(backend: LocalBackend, plan: LaunchPlan, name: str, home: Path) -> float:
    exit_file = home / "local-jobs" / name / "exit.json"
    started = time.perf_counter()
    backend.launch(name, plan)
    while not exit_file.is_file():
        time.sleep(0.005)
    took = time.perf_counter() - started
    log = (home / "local-jobs" / name / "logs" / "train.log").read_text()
    if "[bench] started" not in log:
        raise SystemExit(f"{name} did not run: {log[-2000:]}")
    return took


def job_environment_seconds(root: Path) -> float:
    from jobs.backends.local.interpreter import Interpreter, layered_environment

    started = time.perf_counter()
    layered_environment(Interpreter.of(sys.executable), root / f"env-{time.perf_counter_ns()}")
    return time.perf_counter() - started


class BeforeSandbox(Sandbox):
    """The sandbox's arguments before issue 34: one bwrap with the bot's own uid, no user namespace."""

    def host_uid(self) -> int:
        return os.getuid()  # the job ran as the bot: nothing handed over

    def arguments(self, mounts: JobMounts) -> list[str]:
        args = [self._executable, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--cap-drop", "ALL", "--hostname", "trainbot-job"]
        if not mounts.network:
            args.append("--unshare-net")
        args += local_sandbox._system_mounts()
        if mounts.hosts is not None:
            args += ["--ro-bind", str(mounts.hosts), "/etc/hosts"]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
        for path in local_sandbox._outermost(mounts.readable):
            args += ["--ro-bind", str(path), str(path)]
        args += ["--ro-bind", str(mounts.folder), str(mounts.folder)]
        for path in local_sandbox._outermost((*mounts.writable, mounts.folder / "output")):
            args += ["--bind", str(path), str(path)]
        return [*args, "--remount-ro", "/", "--chdir", str(mounts.cwd)]


class NoLimits(JobLimits):
    """No disk watch and no RLIMIT_FSIZE for the wrapper."""

    def wrapper_options(self, watch: list[Path], cgroups: list[Path]) -> list[str]:
        return []


class NoCgroups(Confinement):
    def _cgroups(self, folder: JobFolder, state: JobState) -> list[Path]:
        return []


class WithoutCgroups(LocalBackend):
    def __init__(self, home: Path, **kwargs: Any) -> None:
        super().__init__(home, **kwargs)
        self._confinement = NoCgroups(kwargs["sandbox"], kwargs["job_limits"], home.resolve())


def backends(home: Path, toolkit: bool) -> dict[str, LocalBackend]:
    clock, limits = SystemClock(), JobLimits.defaults()
    plain = NoLimits(**limits.figures())
    return {
        "unsandboxed": LocalBackend(home, clock=clock, offline=True, use_toolkit=toolkit, sandbox=Sandbox("off"),
                                    own_code_unsandboxed=True, job_limits=limits),
        "before": WithoutCgroups(home, clock=clock, offline=True, use_toolkit=toolkit,
                                 sandbox=BeforeSandbox("bwrap"), job_limits=plain),
        "sandbox": WithoutCgroups(home, clock=clock, offline=True, use_toolkit=toolkit, sandbox=Sandbox("bwrap"),
                                  job_limits=plain),
        "now": LocalBackend(home, clock=clock, offline=True, use_toolkit=toolkit, sandbox=Sandbox("bwrap"),
                            job_limits=limits),
    }


def bare_seconds(sandbox: Sandbox, root: Path, limits: JobLimits | None) -> float:
    """The sandbox alone around `true` (and, with ``limits``, a job's cgroups made and removed): no Python, no
    job folder work, so the layers' own cost shows through the machine's noise."""
    from jobs.backends.local import limits as local_limits

    folder = root / "bare"
    (folder / "output" / "data").mkdir(parents=True, exist_ok=True)
    mounts = JobMounts(folder, (folder / "output" / "data",), (), network=False, cwd=folder)
    started = time.perf_counter()
    made = []
    cgroups = local_limits.machine_cgroups()[0]
    if limits is not None and cgroups is not None:
        made = cgroups.create(f"bench-{time.perf_counter_ns()}", limits)
    subprocess.run([*sandbox.arguments(mounts), "--", "/bin/true"], check=True)
    local_limits.remove(made)
    return time.perf_counter() - started


def main() -> int:
    # The baseline: own code started with no sandbox, which a root bot refuses to do for people. Measured here.
    training_jobs.runs_as_root = lambda: False  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runner", choices=("direct", "toolkit"), default="direct")
    args = parser.parse_args()
    problem = Sandbox().problem()
    if problem is not None:
        print(f"no sandbox to measure: {problem}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url, commit = make_repository(root / "git")
        link_runtimes(root / "home")  # own code runs on its image's runtime: the kept one, not built here
        kinds = backends(root / "home", args.runner == "toolkit")
        plan = plan_for(url, commit, root / "home")
        figures: dict[str, list[float]] = {kind: [] for kind in kinds}
        for round_ in range(args.rounds + 1):
            for kind, backend in kinds.items():
                took = start_seconds(backend, plan, f"bench-{kind}-{round_}", root / "home")
                if round_ > 0:  # the first launch of each kind fills the code cache
                    figures[kind].append(took)
        env_seconds = statistics.median(job_environment_seconds(root / "envs") for _ in range(20))
        bare = {kind: statistics.median(bare_seconds(sandbox, root, limits) for _ in range(30)) for kind, sandbox, limits
                in (("before", BeforeSandbox("bwrap"), None), ("sandbox", Sandbox("bwrap"), None),
                    ("now", Sandbox("bwrap"), JobLimits.defaults()))}
    median = {kind: statistics.median(values) for kind, values in figures.items()}
    print(f"local job start, {args.runner} runner, median of {args.rounds} launches each (bot uid {os.geteuid()}):")
    for kind, values in figures.items():
        print(f"  {kind:12} {median[kind]:6.3f} s   (min {min(values):.3f}, max {max(values):.3f})")
    print(f"  now / before       {median['now'] / median['before']:5.2f} x   "
          f"issue 34 adds {median['now'] - median['before']:+.3f} s")
    print(f"  sandbox / before   {median['sandbox'] / median['before']:5.2f} x   "
          f"the user namespace (and the root layer) add {median['sandbox'] - median['before']:+.3f} s")
    print(f"  now / sandbox      {median['now'] / median['sandbox']:5.2f} x   "
          f"the limits (cgroups, disk watch) add {median['now'] - median['sandbox']:+.3f} s")
    print(f"  now / unsandboxed  {median['now'] / median['unsandboxed']:5.2f} x   "
          f"sandbox and limits add {median['now'] - median['unsandboxed']:+.3f} s (target: under 1 s)")
    print(f"  of all: the job's own Python environment, made in {env_seconds * 1000:.0f} ms (median of 20)")
    print("the sandbox alone around /bin/true, median of 30:")
    for kind, seconds in bare.items():
        print(f"  {kind:12} {seconds * 1000:6.1f} ms   {seconds / bare['before']:5.2f} x before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
