"""The installed `trainbot` command against SageMaker on a loopback moto server, as an operator uses it.

Each command is a fresh process (as in a shell); the state between them lives in TRAINBOT_HOME.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.moto_server import (
    FAKE_CREDENTIALS,
    MotoAws,
    moto_server,  # noqa: F401  (the fixture)
    set_training_job_state,
)

TRAINBOT = Path(sys.executable).with_name("trainbot")


@pytest.fixture
def cli_env(moto_server: MotoAws, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "SLACK_"))}
    env.update(FAKE_CREDENTIALS)
    env.update(
        AWS_ENDPOINT_URL=moto_server.endpoint_url,
        AWS_DEFAULT_REGION=moto_server.region,
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
        TRAINBOT_BACKEND="sagemaker",
        TRAINBOT_ROLE_ARN=moto_server.role_arn,
        TRAINBOT_BUCKET=moto_server.bucket,
        TRAINBOT_HOME=str(tmp_path / "home"),
        TRAINBOT_RELAUNCH_BACKOFF_SECONDS="0",
    )
    return env


def trainbot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TRAINBOT), *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_launch_status_and_watch_a_spot_job(moto_server: MotoAws, cli_env: dict[str, str]) -> None:  # noqa: F811
    launched = trainbot(cli_env, "launch", "distilbert-spot", "epochs=2")
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip().splitlines()[-1]
    job = moto_server.client("sagemaker").describe_training_job(TrainingJobName=f"{lineage}-1")
    assert job["EnableManagedSpotTraining"] is True
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{moto_server.bucket}/trainbot/{lineage}/checkpoints"

    listed = trainbot(cli_env, "jobs")
    assert listed.returncode == 0 and lineage in listed.stdout and "running" in listed.stdout

    set_training_job_state(
        f"{lineage}-1", "Completed", "Completed", billable_seconds=300, training_seconds=1000,
        final_metrics={"eval_accuracy": 0.91},
        model_artifacts=f"s3://{moto_server.bucket}/trainbot/{lineage}/output/{lineage}-1/output/model.tar.gz",
    )
    watched = trainbot(cli_env, "watch", "--once")
    assert watched.returncode == 0, watched.stderr
    status = trainbot(cli_env, "status", f"{lineage}-1")  # a SageMaker job name works as well as the lineage
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout.lower() and "70%" in status.stdout

    deployed = trainbot(cli_env, "deploy", lineage, "instance_type=ml.g4dn.xlarge")
    assert deployed.returncode == 0, deployed.stderr
    endpoint = deployed.stdout.strip().splitlines()[-1]
    sagemaker = moto_server.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName=endpoint)["EndpointName"] == endpoint
    assert trainbot(cli_env, "watch", "--once").returncode == 0
    undeployed = trainbot(cli_env, "undeploy", endpoint)
    assert undeployed.returncode == 0, undeployed.stderr
    assert endpoint not in [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]


def test_status_and_watch_show_the_live_progress_cloudwatch_has(moto_server: MotoAws, cli_env: dict[str, str]) -> None:  # noqa: F811
    launched = trainbot(cli_env, "launch", "distilbert-spot")
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip().splitlines()[-1]
    job = f"{lineage}-1"
    set_training_job_state(job, "InProgress", "Training")
    now = datetime.now(timezone.utc)
    dimension = [{"Name": "TrainingJobName", "Value": job}]
    moto_server.client("cloudwatch").put_metric_data(Namespace="/aws/sagemaker/TrainingJobs", MetricData=[
        {"MetricName": name, "Dimensions": dimension, "Timestamp": now - timedelta(seconds=age), "Value": value}
        for name, value, age in (("step", 100.0, 150), ("step", 160.0, 30), ("loss", 0.42, 30))
    ])
    status = trainbot(cli_env, "status", lineage)
    assert status.returncode == 0, status.stderr
    progress = next(line for line in status.stdout.splitlines() if "progress:" in line)
    assert "step 160/782 · loss 0.4200 · ETA " in progress and "so far" in progress
    assert "  forecast 11 min / $0.17, so far " in status.stdout  # the plan's forecast beside the time so far
    watched = trainbot(cli_env, "watch", "--once")
    assert watched.returncode == 0, watched.stderr
    assert "progress: 1 running, 1 with progress, 1 cards updated" in watched.stdout


def test_schedule_run_launches_at_once(moto_server: MotoAws, cli_env: dict[str, str]) -> None:  # noqa: F811
    added = trainbot(cli_env, "schedule", "add", "nightly", "cron=0 2 * * *", "tz=Europe/Berlin", "distilbert-spot")
    assert added.returncode == 0, added.stderr
    run = trainbot(cli_env, "schedule", "run", "nightly")
    assert run.returncode == 0, run.stderr
    lineage = run.stdout.strip().splitlines()[-1]
    job = moto_server.client("sagemaker").describe_training_job(TrainingJobName=f"{lineage}-1")
    assert job["EnableManagedSpotTraining"] is True
    listed = trainbot(cli_env, "schedule", "list")
    assert "nightly" in listed.stdout and lineage in listed.stdout


def test_logs_prints_each_hosts_last_lines(moto_server: MotoAws, cli_env: dict[str, str]) -> None:  # noqa: F811
    launched = trainbot(cli_env, "launch", "bert-squad")  # 2 instances: algo-1 and algo-2
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip().splitlines()[-1]
    logs = moto_server.client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    start = int(time.time() * 1000)
    for host in (2, 1):
        stream = f"{lineage}-1/algo-{host}-1700000000"
        logs.create_log_stream(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream)
        logs.put_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream, logEvents=[
            {"timestamp": start + i, "message": f"algo-{host} line {i}"} for i in range(10)])
    shown = trainbot(cli_env, "logs", lineage, "--lines", "2")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "== algo-1 (2 lines) ==", "algo-1 line 8", "algo-1 line 9",
        "== algo-2 (2 lines) ==", "algo-2 line 8", "algo-2 line 9",
    ]
    bad = trainbot(cli_env, "logs", lineage, "--lines", "0")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "trainbot: The number of lines must be a whole number from 1 to 500, not '0'."]


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("launch", "distilbert-spot", "instances=999"), 2, "instance"),
        (("status", "no-such-job-1"), 2, "no-such-job-1"),
        (("schedule", "add", "bad", "cron=0 25 * * *", "distilbert-spot"), 2, "cron"),
        (("deploy", "no-such-job"), 2, "no-such-job"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli_env: dict[str, str], args: tuple[str, ...], code: int, says: str) -> None:
    result = trainbot(cli_env, *args)
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr


def test_an_unreachable_aws_is_one_line_and_exit_1(cli_env: dict[str, str]) -> None:
    cli_env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # discard port: nothing answers
    result = trainbot(cli_env, "launch", "distilbert-spot")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "testing" not in result.stderr  # the secret key never shows


def test_status_refreshes_a_job_nothing_watches_and_says_why_it_ended(
    moto_server: MotoAws, cli_env: dict[str, str]  # noqa: F811
) -> None:
    """A job launched with `trainbot launch` and never watched: status describes it once, records its
    ending (the history record included) and says why it ended, instead of "running (so far)" forever."""
    import json

    from jobs.clock import SystemClock
    from jobs.store.runs import RunHistory
    from jobs.store.store import Store

    done = trainbot(cli_env, "launch", "distilbert-spot").stdout.strip().splitlines()[-1]
    failed = trainbot(cli_env, "launch", "distilbert-spot").stdout.strip().splitlines()[-1]
    set_training_job_state(f"{done}-1", "Completed", "Completed", billable_seconds=300, training_seconds=1000,
                           final_metrics={"eval_accuracy": 0.91})
    set_training_job_state(f"{failed}-1", "Failed", failure_reason="AlgorithmError: ExecuteUserScriptError: exit 1")

    status = trainbot(cli_env, "status", done)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == f"Job {done}: completed"
    assert "refreshed from the backend just now; watched never: `trainbot watch` follows it" in status.stdout
    store = Store(f"sqlite:///{cli_env['TRAINBOT_HOME']}/trainbot.db", clock=SystemClock())
    took_seconds, _ = RunHistory(store, SystemClock()).took_of(done)
    assert took_seconds is not None  # the history record later forecasts learn from

    shown = trainbot(cli_env, "status", failed, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "failed" and data["reason"].startswith("AlgorithmError: ExecuteUserScriptError")
    assert data["watch"] == {"last_watched_at": None, "refreshed": True}
    assert trainbot(cli_env, "watch", "--once").returncode == 0
    again = trainbot(cli_env, "status", failed)
    assert "  ended: AlgorithmError: ExecuteUserScriptError: exit 1" in again.stdout.splitlines()
    assert "refreshed" not in again.stdout  # nothing to refresh: it has ended
    store.dispose()


def test_status_describes_a_job_that_ended_after_the_last_watch_cycle(
    moto_server: MotoAws, cli_env: dict[str, str]  # noqa: F811
) -> None:
    """Issue 35, item 7: a console (or `watch`) that ran a cycle a moment ago leaves a fresh watch stamp; a job
    that ended since is still described by `trainbot status`, not shown running with its cost growing."""
    lineage = trainbot(cli_env, "launch", "distilbert-spot").stdout.strip().splitlines()[-1]
    set_training_job_state(f"{lineage}-1", "InProgress", "Training")
    assert trainbot(cli_env, "watch", "--once").returncode == 0  # the stamp: watched just now, and it ran
    assert "running" in trainbot(cli_env, "status", lineage).stdout.splitlines()[0]
    set_training_job_state(f"{lineage}-1", "Completed", "Completed", billable_seconds=300, training_seconds=1000,
                           final_metrics={"eval_accuracy": 0.91})

    status = trainbot(cli_env, "status", lineage)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == f"Job {lineage}: completed"
    assert "refreshed from the backend" not in status.stdout  # watched lately: nothing to say about following it


def test_jobs_and_status_of_every_job_as_json_for_scripts(
    moto_server: MotoAws, cli_env: dict[str, str]  # noqa: F811
) -> None:
    """Issue 35, item 12: `trainbot jobs --json` and `trainbot status --json` without a job (every job)."""
    import json

    assert json.loads(trainbot(cli_env, "jobs", "--json").stdout) == []
    first = trainbot(cli_env, "launch", "distilbert-spot").stdout.strip().splitlines()[-1]
    second = trainbot(cli_env, "launch", "bert-squad").stdout.strip().splitlines()[-1]
    set_training_job_state(f"{first}-1", "Completed", "Completed", billable_seconds=300, training_seconds=1000,
                           final_metrics={"eval_accuracy": 0.91})
    set_training_job_state(f"{second}-1", "InProgress", "Training")

    listed = trainbot(cli_env, "jobs", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = {job["id"]: job for job in json.loads(listed.stdout)}
    assert set(jobs) == {first, second}
    assert set(jobs[first]) == {"id", "status", "ended", "job_name", "attempts", "task", "model", "dataset",
                                "instance_type", "instance_count", "spot", "backend", "launched_by", "schedule",
                                "worst_case_usd", "created_at", "updated_at"}
    assert (jobs[second]["job_name"], jobs[second]["instance_count"], jobs[second]["spot"]) == (f"{second}-1", 2, False)

    statuses = trainbot(cli_env, "status", "--json")
    assert statuses.returncode == 0, statuses.stderr
    reports = {report["lineage_id"]: report for report in json.loads(statuses.stdout)}
    assert reports[first]["status"] == "completed" and reports[first]["spot_savings"] == "70%"
    assert reports[second]["status"] == "running" and reports[second]["partial"] is True
    text = trainbot(cli_env, "status")
    assert f"Job {first}: completed" in text.stdout and f"Job {second}: running" in text.stdout
