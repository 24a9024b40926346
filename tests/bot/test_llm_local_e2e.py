"""End to end on the local backend, the LLM recipe made small: `llm-lora` trains a LoRA adapter on a tiny causal
LM (built from a config) with TRL and PEFT on the newest image's runtime (its transformers, TRL, PEFT and
accelerate, this machine's CPU torch), has its spot capacity taken (its processes killed, no signal to act on),
is relaunched by the watcher, resumes from its adapter checkpoint and completes; its report has loss, eval loss
and tokens per second; it deploys to a local endpoint, which answers a prompt with generated text.

A Hugging Face token comes from (moto's) Secrets Manager: the job's process is told one is set, and the token
is nowhere else: not in the store (plan, audit, messages), the job's folder, its log, or the plan card's note.
Real processes, real training; one test, since each step needs the one before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.wiring import build_runtime
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.endpoints.port import EndpointStatus
from jobs.lineage import LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from tests.support.moto_server import MotoAws, moto_aws, moto_server  # noqa: F401  (fixtures)
from tests.support.runtimes import link_runtimes
from tests.support.waiting import wait_for

OPERATOR = Actor("cli:test", via="cli")
TOKEN = "hf_e2eSECRETtokenNeverShown0123456789"
RUNTIME = "transformers5.3.0-pt2.9.0-py312"


def _files_holding(root: Path, secret: bytes) -> list[str]:
    """Every file under ``root`` (links not followed: the shared runtimes) whose bytes hold ``secret``."""
    found = []
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        if secret in path.read_bytes():
            found.append(str(path))
    return found


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first run builds the 5.3 image runtime (pip, minutes) and its tiny LM
def test_llm_lora_trains_is_reclaimed_resumes_deploys_and_generates(local_home: Path, moto_aws: MotoAws) -> None:  # noqa: F811
    link_runtimes(local_home)
    secret = moto_aws.client("secretsmanager").create_secret(Name="trainbot-e2e-hf-token", SecretString=TOKEN)["ARN"]
    settings = Settings(trainbot_home=local_home, trainbot_backend="local", trainbot_relaunch_backoff_seconds=0,
                        trainbot_hf_token_secret_arn=secret)
    runtime = build_runtime(settings, clock=SystemClock())  # the real clock: a reclaim shows Interrupted briefly
    backend = runtime.backend
    assert isinstance(backend, LocalBackend)
    plan = runtime.jobs.plan("llm-lora max_steps=30")
    note = backend.scaling_note(plan) or ""
    assert "tiny causal LM with a LoRA adapter" in note and "transformers 5.3.0 runtime" in note

    lineage = runtime.jobs.launch("llm-lora max_steps=30", actor=OPERATOR)
    checkpoints = backend.checkpoint_folder(lineage.checkpoint_uri)
    furthest = checkpoints / "trainbot-furthest-step.json"

    def past_a_checkpoint() -> bool:
        first = backend.describe(f"{lineage.id}-1")
        assert not first.status.is_terminal(), f"the first attempt ended: {first.failure_reason}"
        saved = [int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/trainer_state.json")]
        return bool(saved) and furthest.is_file() and json.loads(furthest.read_text())["step"] > max(saved)

    wait_for(past_a_checkpoint, "a step past the first adapter checkpoint", seconds=1500)
    saved = sorted(checkpoints.glob("checkpoint-*"))[0]
    assert (saved / "adapter_model.safetensors").is_file() and (saved / "optimizer.pt").is_file()
    backend.take_capacity(f"{lineage.id}-1")

    def ended() -> bool:
        runtime.watcher.poll_once()
        return runtime.jobs.get(lineage.id).status.is_terminal()

    wait_for(ended, "the lineage to end after its relaunch")
    lineage = runtime.jobs.get(lineage.id)
    assert lineage.status is LineageStatus.COMPLETED
    first, second = lineage.attempts
    assert first.secondary_status == "MaxWaitTimeExceeded"
    assert second.resumed_from_step and second.resumed_from_step >= int(saved.name.split("-")[1])
    redone = backend.describe(second.job_name).steps_redone
    assert redone is not None and redone >= 1  # the kill lost the steps after the checkpoint; they were redone
    log = "\n".join(backend.log_tail(second.job_name, 400))
    assert f"runtimes/{RUNTIME}" in (Path(backend.console_links(second.job_name)["log"]).read_text()) or RUNTIME in log
    assert "[hub] a Hugging Face token is set" in log  # the job's process got it

    series = backend.metric_series(second.job_name)
    assert {"loss", "eval_loss", "train_tokens_per_second"} <= set(series)
    assert series["train_tokens_per_second"][-1].value > 0
    assert series["loss"][-1].x == 30  # the run's last step, as an uninterrupted run ends
    model = Path(backend.describe(second.job_name).model_artifacts or "")
    assert (model / "adapter" / "adapter_model.safetensors").is_file() and (model / "model.safetensors").is_file()

    assert runtime.endpoints is not None
    name = runtime.endpoints.deploy(lineage.id, options={}, actor=OPERATOR).name

    def serving() -> bool:
        runtime.endpoints.poll_once()
        return runtime.endpoints.get(name).status is not EndpointStatus.CREATING

    wait_for(serving, "the local endpoint to load the merged model")
    assert runtime.endpoints.get(name).status is EndpointStatus.IN_SERVICE
    answer = runtime.endpoints.predict(name, {"prompt": "what colour is the sky ?", "max_new_tokens": "12"},
                                       actor=OPERATOR)
    assert isinstance(answer["answer"], str) and answer["answer"].strip()  # text the tuned model generated
    runtime.endpoints.undeploy(name, actor=OPERATOR)

    assert _files_holding(local_home, TOKEN.encode()) == []  # the store, the job folders, logs, endpoints
    assert TOKEN not in note
    runtime.shutdown()
