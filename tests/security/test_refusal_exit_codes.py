"""Issue 22, item 12: a refusal is exit 2 on every CLI path, with one sentence on stderr.

Refusals are what the bot will not do as asked: bad input, a cap (instances, a job's or the day's spend, an
endpoint's hourly price), a per-user limit, a permission, the wrong state. Each is tried with the installed
`trainbot`, on the local backend and on SageMaker (a loopback moto server); failures (an unreachable AWS)
stay exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import errors
from tests.security.cli import clean_env, one_sentence, trainbot
from tests.support.environment import outside_env
from tests.support.moto_server import (
    FAKE_CREDENTIALS,
    MotoAws,
    moto_server,  # noqa: F401  (the fixture)
    set_training_job_state,
)

LOCAL_REFUSALS = [
    ({"TRAINBOT_MAX_JOB_USD": "0.5"}, ("launch", "distilbert-spot"), "TRAINBOT_MAX_JOB_USD"),
    ({"TRAINBOT_DAILY_BUDGET_USD": "0.01"}, ("launch", "distilbert-spot"), "TRAINBOT_DAILY_BUDGET_USD"),
    ({}, ("launch", "distilbert-spot", "instances=999"), "TRAINBOT_MAX_INSTANCES"),
    ({}, ("schedule", "add", "often", "cron=* * * * *", "distilbert-spot"), "TRAINBOT_MIN_SCHEDULE_MINUTES"),
    ({}, ("schedule", "pause", "nothing-here"), "no schedule named"),
    ({}, ("stop", "no-such-job"), "no-such-job"),
    ({}, ("recipe", "save", "max-run", "distilbert-spot"), "key or command word"),
    ({"TRAINBOT_CODE_SOURCES": "https://github.com/team/"},
     ("plan", "code=git+https://github.com/other/x.git@main", "entry=t.py", "model=m", "dataset=imdb"),
     "not among the sources"),
]


def test_every_refusal_class_is_exit_2_and_every_failure_exit_1() -> None:
    refusals = (errors.BadInput, errors.Refused)
    for kind in _subclasses(errors.TrainbotError):
        assert kind.exit_code == (2 if issubclass(kind, refusals) else 1), kind
    for kind in (errors.PermissionDenied, errors.BudgetExceeded, errors.LimitReached, errors.InvalidState):
        assert issubclass(kind, errors.Refused)


@pytest.mark.parametrize(("extra", "args", "says"), LOCAL_REFUSALS, ids=lambda v: str(v)[:40])
def test_a_refusal_on_the_local_backend_is_exit_2(tmp_path: Path, extra: dict[str, str], args: tuple[str, ...],
                                                   says: str) -> None:
    done = trainbot(clean_env(tmp_path / "home", **extra), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says.lower() in one_sentence(done).lower()


def test_per_user_limits_are_exit_2(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home", TRAINBOT_MAX_SCHEDULES_PER_USER="1", TRAINBOT_MAX_RECIPES_PER_USER="1")
    assert trainbot(env, "schedule", "add", "one", "cron=0 2 * * *", "distilbert-spot").returncode == 0
    second = trainbot(env, "schedule", "add", "two", "cron=0 3 * * *", "distilbert-spot")
    assert second.returncode == 2 and "TRAINBOT_MAX_SCHEDULES_PER_USER" in one_sentence(second)
    assert trainbot(env, "recipe", "save", "first", "distilbert-spot").returncode == 0
    again = trainbot(env, "recipe", "save", "second", "bert-squad")
    assert again.returncode == 2 and "TRAINBOT_MAX_RECIPES_PER_USER" in one_sentence(again)


def test_a_scheduled_run_over_the_budget_is_exit_2(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home")
    assert trainbot(env, "schedule", "add", "nightly", "cron=0 2 * * *", "distilbert-spot").returncode == 0
    run = trainbot({**env, "TRAINBOT_MAX_JOB_USD": "0.5"}, "schedule", "run", "nightly")
    assert run.returncode == 2 and "TRAINBOT_MAX_JOB_USD" in one_sentence(run)


# ---------------------------------------------------------------- SageMaker (moto)


@pytest.fixture
def aws_env(moto_server: MotoAws, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    env = outside_env()
    env.update(FAKE_CREDENTIALS)
    env.update(AWS_ENDPOINT_URL=moto_server.endpoint_url, AWS_DEFAULT_REGION=moto_server.region,
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true",
               TRAINBOT_BACKEND="sagemaker", TRAINBOT_ROLE_ARN=moto_server.role_arn, TRAINBOT_BUCKET=moto_server.bucket,
               TRAINBOT_HOME=str(tmp_path / "home"), TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR="2")
    return env


def test_sagemaker_caps_and_states_are_exit_2(moto_server: MotoAws, aws_env: dict[str, str]) -> None:  # noqa: F811
    sagemaker = moto_server.client("sagemaker")  # the server is shared with other tests: compare counts

    def made() -> tuple[int, int]:
        jobs = sagemaker.get_paginator("list_training_jobs").paginate()
        endpoints = sagemaker.get_paginator("list_endpoints").paginate()
        return (sum(len(page["TrainingJobSummaries"]) for page in jobs),
                sum(len(page["Endpoints"]) for page in endpoints))

    before = made()
    over = trainbot({**aws_env, "TRAINBOT_MAX_JOB_USD": "1"}, "launch", "bert-squad")
    assert over.returncode == 2 and "TRAINBOT_MAX_JOB_USD" in one_sentence(over)
    assert made() == before  # nothing launched

    launched = trainbot(aws_env, "launch", "distilbert-spot")
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip().splitlines()[-1]
    set_training_job_state(f"{lineage}-1", "Completed", "Completed", billable_seconds=300, training_seconds=1000,
                           model_artifacts=f"s3://{moto_server.bucket}/trainbot/{lineage}/output/model.tar.gz")
    assert trainbot(aws_env, "watch", "--once").returncode == 0

    dear = trainbot(aws_env, "deploy", lineage, "instance_type=ml.p4d.24xlarge")
    assert dear.returncode == 2 and "TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR" in one_sentence(dear)
    many = trainbot(aws_env, "deploy", lineage, "instance_type=ml.g4dn.xlarge", "instance_count=99")
    assert many.returncode == 2 and "instance_count=99" in one_sentence(many)
    assert made()[1] == before[1]  # no endpoint made
    ended = trainbot(aws_env, "stop", lineage)
    assert ended.returncode == 2 and "already ended" in one_sentence(ended)


def test_a_failure_is_still_exit_1(aws_env: dict[str, str]) -> None:
    down = trainbot({**aws_env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "launch", "distilbert-spot")
    assert down.returncode == 1 and one_sentence(down)


def _subclasses(kind: type) -> list[type]:
    found = []
    for sub in kind.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
