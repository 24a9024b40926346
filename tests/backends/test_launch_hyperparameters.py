"""No CreateTrainingJob request carries a sagemaker_* hyperparameter a user chose: the launcher's
hyperparameters in the request as sent are the SDK's own for the job's distribution, whatever hp.* says,
and a plan that carries one anyway (stored, replayed, made by hand) is refused before any request; the
local backend refuses it before it starts anything."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.planning.spec import JobSpec
from tests.support.moto_server import CallRecorder, MotoAws, plan_for, sagemaker_backend

#: Per distribution: a recipe, and the same recipe with hyperparameters a user may type.
RECIPES = {
    "none": "distilbert-spot spot=no",
    "data": "bert-squad",
    "model": "roberta-mnli",
    "ddp": "distilbert-spot distribution=ddp instances=2 instance_type=ml.p3.16xlarge spot=no",
}
USER_OPTIONS = (
    "hp.run_name=sagemaker_distributed_dataparallel_enabled hp.warmup_steps=5 hp.report_to=tensorboard "
    "hp.optim=adamw_torch hp.label_smoothing_factor=0.1 'hp.debug=-x LD_PRELOAD=/tmp/evil.so' seed=7"
)
#: Differ per job by design (the job's name and where its code was uploaded).
PER_JOB = {"sagemaker_job_name", "sagemaker_submit_directory"}


def launcher_hyperparameters(request: dict[str, Any]) -> dict[str, Any]:
    hps = request["HyperParameters"]
    return {k: json.loads(v) for k, v in hps.items() if k.lower().startswith("sagemaker_") and k not in PER_JOB}


def test_user_hyperparameters_never_change_the_launchers_own(moto_aws: MotoAws) -> None:
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]))
    for distribution, text in RECIPES.items():
        backend.launch(f"base-{distribution}-1", plan_for(text, f"base-{distribution}"))
        backend.launch(f"user-{distribution}-1", plan_for(f"{text} {USER_OPTIONS}", f"user-{distribution}"))
        base, user = recorder.by_name(f"base-{distribution}-1"), recorder.by_name(f"user-{distribution}-1")
        assert launcher_hyperparameters(user) == launcher_hyperparameters(base), distribution
        assert json.loads(user["HyperParameters"]["debug"]) == "-x LD_PRELOAD=/tmp/evil.so"  # a value, inert
    none = launcher_hyperparameters(recorder.by_name("user-none-1"))
    assert not any(re.search("distributed|mpi", key) for key in none), none  # the card says Distribution: none


@pytest.mark.parametrize(
    "name",
    [
        "sagemaker_mpi_custom_mpi_options",
        "sagemaker_distributed_dataparallel_enabled",
        "SageMaker_Program",
        "mp_parameters",
        "output_dir",
        "push_to_hub",
        "hub_token",
    ],
)
def test_a_plan_carrying_a_reserved_hyperparameter_is_refused_before_any_request(
    moto_aws: MotoAws, name: str
) -> None:
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]))
    forged = forged_plan(name, "-x LD_PRELOAD=/tmp/evil.so")
    with pytest.raises(SpecError, match=f"hp.{name} is refused"):
        backend.launch("inject-1", forged)
    assert recorder.calls == []


def forged_plan(name: str, value: object) -> Any:
    plan = plan_for("distilbert-spot spot=no", "inject")
    hps = {**plan.estimator["hyperparameters"], name: value}
    return dataclasses.replace(plan, estimator={**plan.estimator, "hyperparameters": hps})


@pytest.mark.parametrize(("name", "value"), [("sagemaker_program", "evil.py"), ("report_to", "wandb"), ("run_name", "a\x00")])
def test_the_local_backend_refuses_it_before_starting_anything(trainbot_home: Path, name: str, value: str) -> None:
    backend = LocalBackend(trainbot_home, clock=SystemClock(), offline=True)
    with pytest.raises(SpecError, match=f"hp.{name} "):
        backend.launch("inject-1", forged_plan(name, value))
    assert not (trainbot_home / "local-jobs" / "inject-1").exists()


def test_typed_reserved_hyperparameters_never_become_a_plan() -> None:
    with pytest.raises(SpecError, match="sagemaker_"):
        parse_command("distilbert-spot spot=no 'hp.sagemaker_mpi_custom_mpi_options=-x LD_PRELOAD=/tmp/evil.so'")
    # A stored spec is read back without the input rules (its row stays readable), but never plans.
    stored = parse_command("distilbert-spot spot=no").model_dump(mode="json")
    stored["hyperparameters"]["sagemaker_distributed_dataparallel_enabled"] = True
    spec = JobSpec.model_validate(stored)
    with pytest.raises(SpecError, match="sagemaker_distributed_dataparallel_enabled is refused"):
        build_plan(spec, bucket="b", lineage_id="stored")
