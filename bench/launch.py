"""Launch overhead of the SageMaker backend against the raw SDK, and the bot process's peak RSS.

    PYTHONPATH=. .venv/bin/python bench/launch.py [--runs 7]

1. On one moto server, in one run: the time from `SageMakerBackend.launch()` to its CreateTrainingJob
   request leaving the client, against `HuggingFace(**plan.estimator).fit(wait=False)` on a plain SDK
   session doing the same job (same plan, same telemetry opt-out: without it the SDK sends a telemetry
   request with no timeout). Runs alternate; prints both medians and the ratio (target <= 1.1).
2. The peak RSS of a bot-like process: every bot/handlers/jobs module and the SageMaker SDK imported,
   the backend and its SDK session built, torch not imported. Prints MB (target < 250).
Figures only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopback_aws import BUCKET, ROLE_ARN, start_moto  # bench/ is the script's sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
PLAN_TEXT = "distilbert-spot"

RSS_PROBE = r"""
import importlib, os, pkgutil, sys
os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
for package in ("bot", "handlers", "jobs"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
import sagemaker.huggingface  # what a launch imports
from jobs.backends.sagemaker.training_jobs import SageMakerBackend
from jobs.backends.aws_session import client_config, make_boto_session
from jobs.backends.sagemaker.session import build_sdk_session
from jobs.clock import SystemClock
session = make_boto_session("us-east-1")
SageMakerBackend(session, role_arn="arn:aws:iam::1:role/r", bucket="b", clock=SystemClock())
build_sdk_session(session, bucket="b", config=client_config())
print("torch" in sys.modules, "transformers" in sys.modules)
# VmHWM, not ru_maxrss: after fork+exec, ru_maxrss still holds the parent's peak.
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


class SendTimes:
    """The moment each CreateTrainingJob request is handed to the HTTP layer."""

    def __init__(self) -> None:
        self.sent: dict[str, float] = {}

    def attach(self, session: Any) -> None:
        session.events.register("before-send.sagemaker.CreateTrainingJob", self._stamp)

    def _stamp(self, request: Any, **_: Any) -> None:
        import json

        self.sent[json.loads(request.body)["TrainingJobName"]] = time.perf_counter()


def _timed(launch: Callable[[str], None], job_name: str, times: SendTimes) -> tuple[float, float]:
    """(wall seconds until the request was sent, CPU seconds of this process for the whole launch)."""
    started, cpu = time.perf_counter(), time.process_time()
    launch(job_name)
    return times.sent[job_name] - started, time.process_time() - cpu


def _launchers(plan: Any, times: SendTimes) -> tuple[Callable[[str], None], Callable[[str], None]]:
    import boto3
    from sagemaker.huggingface import HuggingFace
    from sagemaker.session import Session

    from jobs.backends.aws_session import make_boto_session
    from jobs.backends.sagemaker.session import SDK_CONFIG
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend
    from jobs.clock import SystemClock

    bot_session = make_boto_session("us-east-1")
    times.attach(bot_session)
    backend = SageMakerBackend(bot_session, role_arn=ROLE_ARN, bucket=BUCKET, clock=SystemClock())

    raw_boto = boto3.Session(region_name="us-east-1")
    times.attach(raw_boto)
    raw_session = Session(boto_session=raw_boto, default_bucket=BUCKET, sagemaker_config=SDK_CONFIG)

    def bot(name: str) -> None:
        backend.launch(name, plan)

    def raw(name: str) -> None:
        HuggingFace(**plan.estimator, role=ROLE_ARN, sagemaker_session=raw_session).fit(
            wait=False, logs=False, job_name=name
        )

    return bot, raw


def launch_overhead(runs: int) -> None:
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import build_plan

    server = start_moto()
    try:
        plan = build_plan(parse_command(PLAN_TEXT), bucket=BUCKET, lineage_id="bench")
        times = SendTimes()
        bot, raw = _launchers(plan, times)
        bot("bench-warm-bot")  # imports and session set-up are paid once, outside the figures
        raw("bench-warm-raw")
        bot_s: list[tuple[float, float]] = []
        raw_s: list[tuple[float, float]] = []
        for run in range(runs):
            order = [(bot, bot_s, "bot"), (raw, raw_s, "raw")]
            for launch, into, label in order if run % 2 == 0 else reversed(order):
                into.append(_timed(launch, f"bench-{label}-{run}", times))
        _report(runs, bot_s, raw_s)
    finally:
        server.stop()


def _report(runs: int, bot: list[tuple[float, float]], raw: list[tuple[float, float]]) -> None:
    bot_wall, raw_wall = statistics.median(w for w, _ in bot), statistics.median(w for w, _ in raw)
    bot_cpu, raw_cpu = statistics.median(c for _, c in bot), statistics.median(c for _, c in raw)
    print(f"launch -> CreateTrainingJob sent, median of {runs}:")
    print(f"  SageMakerBackend.launch     {bot_wall * 1000:8.1f} ms")
    print(f"  raw HuggingFace.fit         {raw_wall * 1000:8.1f} ms")
    print(f"  ratio backend / raw SDK     {bot_wall / raw_wall:8.3f}  (target <= 1.1)")
    # CPU time (this process, moto's server thread included) is the work itself; wall time also
    # carries whatever else shares the CPUs.
    print(
        f"  CPU per launch: backend {bot_cpu * 1000:.0f} ms, raw {raw_cpu * 1000:.0f} ms, "
        f"ratio {bot_cpu / raw_cpu:.3f}"
    )


def peak_rss() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SAGEMAKER_SUPPRESS_V2_WARNING="1")
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    ).stdout.split("\n")
    flags, kilobytes = [line for line in out if line.strip()][-2:]
    print(f"bot-like process peak RSS     {int(kilobytes) / 1024:8.1f} MB  (target < 250)")
    print(f"  torch, transformers imported: {flags}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    peak_rss()  # first, while this process is still small
    launch_overhead(args.runs)


if __name__ == "__main__":
    main()
