"""TRAINBOT_HF_TOKEN_SECRET_ARN: a gated model's Hugging Face token reaches the job's environment only.

On (moto's) SageMaker the launch sends the secret's ARN, never the token: the CreateTrainingJob request as sent,
its hyperparameters, the stored plan, the audit and every queued message are searched for the token. The job's
own reader (training/hub_token.py) then sets HF_TOKEN from the secret with the job's role and prints only that
one is set. A secret that is not there, or an ARN that is not one, is refused before anything is launched. The
local backend's side (the token in the job process's environment, nowhere in its folder or log) is
tests/bot/test_llm_local_e2e.py.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.wiring import build_endings
from jobs.errors import ConfigError
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
TOKEN = "hf_SECRETtokenOfTheTeam0123456789abcdef"
TRAINING = Path(__file__).resolve().parents[2] / "training"


def _secret(aws: MotoAws, name: str, value: str) -> str:
    return str(aws.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"])


def test_a_sagemaker_job_gets_the_secrets_arn_and_the_token_is_nowhere(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    arn = _secret(moto_aws, f"trainbot-hf-{tmp_path.name}", TOKEN)
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    sent = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[sent]), hub_token_arn=arn)
    settings = Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn, trainbot_home=tmp_path,
                        trainbot_hf_token_secret_arn=arn)
    jobs = JobService(store=store, backend=backend, settings=settings, clock=clock,
                      new_lineage_id=lambda spec: f"tok-{datetime.now():%H%M%S%f}")
    lineage = jobs.launch("llm-lora", actor=ALICE)
    request = sent.by_name(f"{lineage.id}-1")
    assert request["Environment"] == {"TRAINBOT_HF_TOKEN_SECRET_ARN": arn}  # the job reads the secret itself
    assert TOKEN not in json.dumps(request)
    stored = store.get_lineage(lineage.id)
    assert TOKEN not in json.dumps(stored.launch_plan) and TOKEN not in stored.spec.model_dump_json()
    clock.advance(1)
    Watcher(store, backend, clock, settings).poll_once()  # moto made it Completed
    build_endings(store, backend, clock, settings).process_due()  # its report, log tail and announcement
    messages = [json.dumps(n.payload) for n in store.outbox.due_notifications(limit=500)]
    assert messages and not any(TOKEN in text for text in messages)
    audit = [json.dumps(entry.detail, default=str) for entry in store.audit_log(target=lineage.id)]
    assert audit and not any(TOKEN in text for text in audit)
    assert TOKEN.encode() not in (tmp_path / "trainbot.db").read_bytes()  # audit rows, plans, everything stored


def test_a_secret_that_is_not_there_is_refused_before_any_job(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    missing = f"arn:aws:secretsmanager:{moto_aws.region}:{moto_aws.account_id}:secret:trainbot-nowhere-AbCdEf"
    sent = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[sent]), hub_token_arn=missing)
    from tests.support.moto_server import plan_for

    with pytest.raises(ConfigError) as refused:
        backend.launch("tok-missing-1", plan_for("llm-lora", "tok-missing"))
    assert "TRAINBOT_HF_TOKEN_SECRET_ARN names a secret the bot cannot use (ResourceNotFoundException)" in str(
        refused.value) and "\n" not in str(refused.value)
    assert sent.calls == []
    with pytest.raises(ConfigError, match="must be a Secrets Manager secret's ARN"):
        sagemaker_backend(moto_aws, hub_token_arn="hf_pasted_the_token_itself")


@pytest.mark.parametrize("stored", [TOKEN, json.dumps({"HF_TOKEN": TOKEN})])
def test_the_job_reads_the_secret_with_its_role_and_never_prints_it(
    moto_aws: MotoAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],  # noqa: F811
    stored: str,
) -> None:
    arn = _secret(moto_aws, f"trainbot-hf-job-{len(stored)}-{tmp_path.name}", stored)
    monkeypatch.syspath_prepend(str(TRAINING))
    monkeypatch.setenv("HF_TOKEN", "")  # recorded as it was, so the token load_token sets goes with the test
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("TRAINBOT_HF_TOKEN_SECRET_ARN", arn)
    sys.modules.pop("hub_token", None)
    import hub_token  # training/hub_token.py, as the job imports it

    hub_token.load_token()
    import os

    assert os.environ["HF_TOKEN"] == TOKEN
    printed = capsys.readouterr()
    assert "[hub] a Hugging Face token is set" in printed.err and TOKEN not in printed.out + printed.err
