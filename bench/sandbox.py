"""What the bubblewrap sandbox adds to the start of a local job, as a ratio against an unsandboxed start.

A team's script that only prints a line and exits (own code from a git repository made here, so the launch is
the one `/train code=...` makes) is launched again and again on the local backend, alternating the sandbox
(TRAINBOT_LOCAL_SANDBOX=auto on a machine where bwrap works) and no sandbox (off, as the console may run it),
in the same process. Each figure is the wall time from `LocalBackend.launch` to the job's recorded exit: the
job folder, the code packed and unpacked, the job's own Python environment, the wrapper, bwrap (or not), and
Python starting. The first launch of each kind warms the code cache and is not counted. The target: the
sandbox adds under 1 s.

    PYTHONPATH=. .venv/bin/python bench/sandbox.py [--rounds 8] [--runner direct|toolkit]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jobs.backends.local.sandbox import Sandbox
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.planning.reader import CommandReader

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


def main() -> int:
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
        toolkit = args.runner == "toolkit"
        backends = {
            "sandboxed": LocalBackend(root / "home", clock=SystemClock(), offline=True, use_toolkit=toolkit,
                                      sandbox=Sandbox("bwrap")),
            "unsandboxed": LocalBackend(root / "home", clock=SystemClock(), offline=True, use_toolkit=toolkit,
                                        sandbox=Sandbox("off"), own_code_unsandboxed=True),
        }
        plan = plan_for(url, commit, root / "home")
        figures: dict[str, list[float]] = {kind: [] for kind in backends}
        for round_ in range(args.rounds + 1):
            for kind, backend in backends.items():
                took = start_seconds(backend, plan, f"bench-{kind}-{round_}", root / "home")
                if round_ > 0:  # the first launch of each kind fills the code cache
                    figures[kind].append(took)
        env_seconds = statistics.median(job_environment_seconds(root / "envs") for _ in range(20))
    sandboxed, plain = (statistics.median(figures[k]) for k in ("sandboxed", "unsandboxed"))
    print(f"local job start, {args.runner} runner, median of {args.rounds} launches each:")
    print(f"  unsandboxed  {plain:6.3f} s   (min {min(figures['unsandboxed']):.3f}, max {max(figures['unsandboxed']):.3f})")
    print(f"  sandboxed    {sandboxed:6.3f} s   (min {min(figures['sandboxed']):.3f}, max {max(figures['sandboxed']):.3f})")
    print(f"  ratio        {sandboxed / plain:6.2f} x   sandbox adds {sandboxed - plain:+.3f} s (target: under 1 s)")
    print(f"  of both: the job's own Python environment, made in {env_seconds * 1000:.0f} ms (median of 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
