"""`trainbot models`, `trainbot endpoint`, `trainbot promote` and `trainbot rollback` as an operator types them
(the CLI's own `main`, one runtime per command as in a shell, the state in TRAINBOT_HOME) against SageMaker
on a loopback moto server: the registry's records after `watch --once`, an endpoint's history, and every
refusal one sentence on stderr with exit 2 (an existing endpoint for `deploy`, an unknown endpoint, a model
that serves already, the per-endpoint cost cap, nothing to roll back). The installed command itself is
run once (`trainbot models`), as tests/bot/test_cli_sagemaker.py runs the others.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.cli import main
from tests.bot.test_cli_sagemaker import trainbot
from tests.support.moto_server import MotoAws, moto_aws, moto_server, set_training_job_state  # noqa: F401


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(moto_aws: MotoAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # noqa: F811
    monkeypatch.setenv("TRAINBOT_BACKEND", "sagemaker")
    monkeypatch.setenv("TRAINBOT_ROLE_ARN", moto_aws.role_arn)
    monkeypatch.setenv("TRAINBOT_BUCKET", moto_aws.bucket)
    monkeypatch.setenv("TRAINBOT_HOME", str(tmp_path / "home"))

    def run(*args: str, **env: str) -> Done:
        with monkeypatch.context() as scoped:
            for key, value in env.items():
                scoped.setenv(key, value)
            code = main(list(args))
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return run


def refused(cli, *args: str, **env: str) -> str:
    done = cli(*args, **env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    return lines[0]


def test_the_registry_and_endpoint_commands_and_their_refusals(moto_aws: MotoAws, cli) -> None:  # noqa: F811
    lineages = []
    for f1 in (80.0, 84.5):
        launched = cli("launch", "bert-squad")
        assert launched.returncode == 0, launched.stderr
        lineage = launched.stdout.strip().splitlines()[-1]
        set_training_job_state(f"{lineage}-1", "Completed", final_metrics={"eval_f1": f1},
                               model_artifacts=f"s3://{moto_aws.bucket}/trainbot/{lineage}/output/m.tar.gz")
        lineages.append(lineage)
    first, second = lineages
    assert cli("watch", "--once").returncode == 0

    models = cli("models", "--json")
    assert models.returncode == 0, models.stderr
    records = sorted(json.loads(models.stdout), key=lambda r: r["version"])
    # The worker's moto server is shared: another test may have registered into this group first, so the
    # versions are SageMaker's next two, in the order the runs ended.
    v1 = records[0]["version"]
    assert [(r["lineage_id"], r["group"], r["version"], r["approval"]) for r in records] == [
        (first, "trainbot-question-answering", v1, "PendingManualApproval"),
        (second, "trainbot-question-answering", v1 + 1, "PendingManualApproval")]
    assert records[1]["metrics"] == {"eval_f1": 84.5} and records[1]["arn"].startswith("arn:aws:sagemaker:")
    assert records[1]["image"].startswith("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-inference")

    assert cli("deploy", first, "name=prod").returncode == 0
    assert cli("watch", "--once").returncode == 0
    assert refused(cli, "deploy", second, "name=prod") == (
        f"trainbot: Endpoint prod exists (it serves {first}): `trainbot promote JOB prod` updates it in place.")
    assert "There is no endpoint 'nope'" in refused(cli, "promote", second, "nope")
    assert f"Endpoint prod already serves {first}" in refused(cli, "promote", first, "prod")
    assert "per-endpoint limit (TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR)" in refused(
        cli, "promote", second, "prod", TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR="0.1")
    assert "nothing to roll back to" in refused(cli, "rollback", "prod")

    history = cli("endpoint", "prod", "--json")
    assert history.returncode == 0, history.stderr
    shown = json.loads(history.stdout)
    assert (shown["endpoint"], shown["lineage_id"], shown["status"]) == ("prod", first, "in_service")
    assert [(r["action"], r["status"], r["package"]) for r in shown["revisions"]] == [
        ("deploy", "serving", f"trainbot-question-answering v{v1}")]
    listed = cli("models", "trainbot-question-answering")
    assert listed.returncode == 0 and f"v{v1} {first}: pending · eval_f1 80; serves prod" in listed.stdout
    assert f"v{v1 + 1} {second}: pending · eval_f1 84.5; not deployed" in listed.stdout
    assert "no model line 'other'" in refused(cli, "models", "other")
    added = cli("schedule", "add", "nightly", "cron=0 2 * * *", "deploy_if_better=yes", "endpoint=prod", "bert-squad")
    assert added.returncode == 0 and added.stdout.startswith("schedule nightly added"), added.stderr
    assert "deploy_if_better=yes needs the endpoint to promote into" in refused(
        cli, "schedule", "add", "other", "cron=0 2 * * *", "deploy_if_better=yes", "bert-squad")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    installed = trainbot(env, "models")  # the installed command, on the same home
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.startswith("Model lines (1)") and "trainbot-question-answering: 2 versions" in installed.stdout


def test_a_promotion_that_makes_the_endpoint_worse_is_refused_without_yes(moto_aws: MotoAws, cli) -> None:  # noqa: F811
    """Issue 35, item 2: `trainbot promote` of a model worse on the comparison's metric than what serves is
    refused with one sentence naming the regression (exit 2, nothing asked of SageMaker); `--yes` goes ahead."""
    lineages = []
    for accuracy in (1.0, 0.54):
        launched = cli("launch", "distilbert-spot")
        assert launched.returncode == 0, launched.stderr
        lineage = launched.stdout.strip().splitlines()[-1]
        set_training_job_state(f"{lineage}-1", "Completed", final_metrics={"eval_accuracy": accuracy},
                               model_artifacts=f"s3://{moto_aws.bucket}/trainbot/{lineage}/output/m.tar.gz")
        lineages.append(lineage)
    good, worse = lineages
    assert cli("watch", "--once").returncode == 0
    assert cli("deploy", good, "name=sentiment").returncode == 0
    assert cli("watch", "--once").returncode == 0

    assert refused(cli, "promote", worse, "sentiment") == (
        f"trainbot: Not promoted: {worse} is worse than {good}, which sentiment serves now: eval_accuracy 1 → 0.54 "
        f"(-46.00 points). Add --yes to promote it anyway: trainbot promote {worse} sentiment --yes")
    history = json.loads(cli("endpoint", "sentiment", "--json").stdout)
    assert [r["action"] for r in history["revisions"]] == ["deploy"]  # nothing was asked of the endpoint

    # Past the question the promotion is recorded and asked of SageMaker (moto lacks UpdateEndpoint, so the
    # update itself is followed in tests/bot/test_slack_promote_buttons.py, on the stub).
    anyway = cli("promote", worse, "sentiment", "--yes")
    history = json.loads(cli("endpoint", "sentiment", "--json").stdout)
    assert [r["action"] for r in history["revisions"]] == ["promote", "deploy"], (anyway.stderr, history)
