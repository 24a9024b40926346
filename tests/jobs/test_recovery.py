"""The recovery policy as a pure decision: every path of DESIGN.md's table, no store, no backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from jobs.lifecycle import events
from jobs.lifecycle.recovery import (
    LAUNCH_LOST,
    GiveUp,
    Nothing,
    Notify,
    RecoveryPolicy,
    Relaunch,
    candidates,
    decide,
    remote_from_attempt,
)
from jobs.lineage import Attempt, AttemptStatus, Lineage, LineageStatus
from jobs.planning.batch import BatchSettings
from jobs.planning.grammar import parse_command
from jobs.records import RemoteJob, RemoteStatus
from jobs.settings import Settings

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
POLICY = RecoveryPolicy(backoff_seconds=30, max_restarts=5)


def attempt(number: int = 1, **fields: Any) -> Attempt:
    base = Attempt(
        lineage_id="spot-1", number=number, job_name=f"spot-1-{number}", instance_type="ml.p3.2xlarge",
        spot=True, status=AttemptStatus.RUNNING, remote_status="InProgress", secondary_status="Training",
        failure_reason="", billable_seconds=None, training_seconds=None, metrics={}, model_artifacts=None,
        resumed_from_step=None, created_at=NOW, updated_at=NOW, ended_at=None,
    )
    return replace(base, **fields)


def lineage(text: str = "distilbert-spot", *, restarts: int = 0, status: LineageStatus = LineageStatus.RUNNING,
            attempts: tuple[Attempt, ...] = ()) -> Lineage:
    return Lineage(
        id="spot-1", spec=parse_command(text, max_instances=16), backend="sagemaker",
        checkpoint_uri="s3://bkt/spot-1/checkpoints", status=status, launched_by="U1", origin="slack",
        channel="C1", message_ts=None, schedule=None, request_id=None, estimated_usd=1.0, restarts=restarts,
        next_relaunch_at=None, next_instance_type=None, next_spot=None, created_at=NOW, updated_at=NOW,
        attempts=attempts or (attempt(),),
    )


def remote(status: RemoteStatus, secondary: str = "", reason: str = "") -> RemoteJob:
    return RemoteJob(name="spot-1-1", status=status, secondary_status=secondary or status.value, failure_reason=reason)


def test_interrupted_notifies_on_the_change_only() -> None:
    interrupted = remote(RemoteStatus.IN_PROGRESS, "Interrupted")
    first = decide(lineage(), attempt(), interrupted, POLICY, NOW)
    again = decide(lineage(), attempt(secondary_status="Interrupted"), interrupted, POLICY, NOW)
    assert first == Notify(events.INTERRUPTED, reason="spot capacity was reclaimed")
    assert again == Nothing()


def test_training_and_stopping_do_nothing() -> None:
    assert decide(lineage(), attempt(), remote(RemoteStatus.IN_PROGRESS, "Training"), POLICY, NOW) == Nothing()
    assert decide(lineage(), attempt(), remote(RemoteStatus.STOPPING), POLICY, NOW) == Nothing()


@pytest.mark.parametrize(
    ("status", "secondary", "reason"),
    [
        (RemoteStatus.STOPPED, "MaxWaitTimeExceeded", ""),
        (RemoteStatus.FAILED, "Failed", "CapacityError: Unable to provision requested ML compute capacity."),
        (RemoteStatus.FAILED, "Failed", "Insufficient capacity for ml.p3.2xlarge in us-east-1"),
    ],
)
def test_capacity_loss_relaunches_on_the_next_fallback_after_the_backoff(
    status: RemoteStatus, secondary: str, reason: str
) -> None:
    decision = decide(lineage(), attempt(), remote(status, secondary, reason), POLICY, NOW)
    assert isinstance(decision, Relaunch)
    # The same GPU count first: a 1-GPU L40S (more memory, faster at fp32, cheapest for the work).
    assert (decision.instance_type, decision.spot) == ("ml.g6e.xlarge", True)
    assert decision.batch == decision.planned == BatchSettings(32, 1, 1, 1)
    assert decision.not_before == NOW + timedelta(seconds=30)
    assert decision.backoff_seconds == 30


def test_internal_error_retries_the_same_type() -> None:
    failed = remote(RemoteStatus.FAILED, "Failed", "InternalServerError: We encountered an internal error.")
    decision = decide(lineage(), attempt(), failed, POLICY, NOW)
    assert isinstance(decision, Relaunch)
    assert (decision.instance_type, decision.spot) == ("ml.p3.2xlarge", True)


def test_backoff_doubles_with_each_relaunch_and_zero_means_at_once() -> None:
    third = attempt(3, instance_type="ml.p3.8xlarge")
    lost = remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded")
    decision = decide(lineage(restarts=2), third, lost, POLICY, NOW)
    assert isinstance(decision, Relaunch) and decision.backoff_seconds == 120
    at_once = decide(lineage(restarts=2), third, lost, RecoveryPolicy(backoff_seconds=0), NOW)
    assert isinstance(at_once, Relaunch) and at_once.not_before == NOW


def test_past_the_last_fallback_recovery_starts_again_from_the_top() -> None:
    last = attempt(4, instance_type="ml.g4dn.xlarge")
    decision = decide(lineage(restarts=3), last, remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), POLICY, NOW)
    assert isinstance(decision, Relaunch)
    assert (decision.instance_type, decision.spot, decision.backoff_seconds) == ("ml.p3.2xlarge", True, 240)


def test_an_on_demand_job_that_loses_capacity_once_is_retried_not_given_up() -> None:
    """Issue 24: bert-squad (2 x ml.p3.16xlarge, on-demand) failing once for capacity gave up at once."""
    squad = lineage("bert-squad", attempts=(attempt(spot=False, instance_type="ml.p3.16xlarge"),))
    capacity = remote(RemoteStatus.FAILED, "Failed", "CapacityError: Unable to provision requested ML compute capacity.")
    moved = decide(squad, squad.attempts[0], capacity, POLICY, NOW)
    assert isinstance(moved, Relaunch) and (moved.instance_type, moved.spot) == ("ml.p4d.24xlarge", False)
    same_type = RecoveryPolicy(backoff_seconds=30, order="same-type")
    again = decide(squad, squad.attempts[0], capacity, same_type, NOW)
    assert isinstance(again, Relaunch) and (again.instance_type, again.backoff_seconds) == ("ml.p3.16xlarge", 30)
    later = attempt(3, spot=False, instance_type="ml.p3.16xlarge")
    assert isinstance(decide(squad, later, capacity, same_type, NOW), Relaunch)  # round and round, backing off


def test_the_give_up_names_what_was_tried() -> None:
    tried_types = ("ml.p3.2xlarge", "ml.g6.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge", "ml.p3.2xlarge", "ml.g6.xlarge")
    attempts = tuple(attempt(n, instance_type=name) for n, name in enumerate(tried_types, start=1))
    ended = lineage(restarts=5, attempts=attempts)
    decision = decide(ended, attempts[-1], remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), POLICY, NOW)
    assert isinstance(decision, GiveUp)
    assert decision.reason.endswith(
        "restart cap of 5 relaunches is reached (tried ml.p3.2xlarge (spot) 2 times, ml.g6.xlarge (spot) 2 times, "
        "ml.g5.xlarge (spot), ml.g4dn.xlarge (spot))"
    )


def test_any_count_moves_on_to_more_gpus_with_the_per_device_batch_divided() -> None:
    any_count = RecoveryPolicy(backoff_seconds=30, order="any-count")
    g5 = lineage("distilbert-spot instance_type=ml.g5.xlarge", attempts=(attempt(2, instance_type="ml.g6.xlarge"),))
    decision = decide(g5, g5.attempts[0], remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), any_count, NOW)
    assert isinstance(decision, Relaunch) and decision.instance_type == "ml.g6e.12xlarge"
    assert decision.batch == BatchSettings(per_device=8, accumulation=1, accelerators=4, instances=1)
    assert decision.batch.global_batch == 32
    same_count = decide(g5, g5.attempts[0], remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), POLICY, NOW)
    assert isinstance(same_count, Relaunch) and same_count.instance_type == "ml.g5.xlarge"  # from the top


def test_the_policy_comes_from_the_settings() -> None:
    assert RecoveryPolicy.from_settings(Settings()).order == "same-count"
    assert RecoveryPolicy.from_settings(Settings(trainbot_recovery_policy="any-count")).order == "any-count"


def test_on_demand_is_the_last_resort_only_when_the_spec_allows_it() -> None:
    allowed = lineage("distilbert-spot on_demand_fallback=yes", restarts=2)
    last_spot = attempt(3, instance_type="ml.g4dn.xlarge")
    decision = decide(allowed, last_spot, remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), POLICY, NOW)
    assert isinstance(decision, Relaunch)
    assert (decision.instance_type, decision.spot) == ("ml.p3.2xlarge", False)
    assert candidates(allowed.spec)[-1] == ("ml.p3.2xlarge", False)
    assert all(spot for _, spot in candidates(lineage().spec))


def test_restart_cap_gives_up_before_the_fallbacks_run_out() -> None:
    capped = lineage("distilbert-spot max_restarts=1", restarts=1)
    second = attempt(2, instance_type="ml.g6.xlarge")
    decision = decide(capped, second, remote(RemoteStatus.FAILED, "Failed", "CapacityError"), POLICY, NOW)
    assert isinstance(decision, GiveUp) and "restart cap of 1" in decision.reason
    assert "(tried ml.p3.2xlarge (spot))" in decision.reason  # the lineage's attempts as recorded


def test_the_operator_cap_bounds_the_spec() -> None:
    policy = RecoveryPolicy.from_settings(Settings(trainbot_max_restarts=0, trainbot_relaunch_backoff_seconds=7))
    assert policy.backoff_seconds == 7
    decision = decide(lineage(), attempt(), remote(RemoteStatus.STOPPED, "MaxWaitTimeExceeded"), policy, NOW)
    assert isinstance(decision, GiveUp)


def test_refused_relaunches_count_towards_the_cap() -> None:
    # The store's restart count only moves on launches that went through; attempt numbers always do.
    refused = attempt(6, status=AttemptStatus.LAUNCH_FAILED)
    failed = remote(RemoteStatus.FAILED, "Failed", "InternalServerError")
    assert isinstance(decide(lineage(restarts=0), refused, failed, POLICY, NOW), GiveUp)


@pytest.mark.parametrize(
    "reason",
    ["AlgorithmError: ExecuteUserScriptError: exit code 1", "Non-zero exit code 137", ""],
)
def test_code_failure_never_relaunches(reason: str) -> None:
    decision = decide(lineage(), attempt(), remote(RemoteStatus.FAILED, "Failed", reason), POLICY, NOW)
    assert isinstance(decision, Notify)
    assert decision.kind == events.FAILED and decision.lineage_status is LineageStatus.FAILED
    assert reason in decision.reason


def test_max_runtime_exceeded_fails_with_a_hint() -> None:
    decision = decide(lineage(), attempt(), remote(RemoteStatus.STOPPED, "MaxRuntimeExceeded"), POLICY, NOW)
    assert isinstance(decision, Notify) and decision.kind == events.FAILED
    assert "max_run" in decision.reason


def test_user_stop_is_the_end_even_when_sagemaker_says_max_wait() -> None:
    stopped_lineage = lineage(status=LineageStatus.STOPPED)
    for secondary in ("Stopped", "MaxWaitTimeExceeded"):
        decision = decide(stopped_lineage, attempt(), remote(RemoteStatus.STOPPED, secondary), POLICY, NOW)
        assert isinstance(decision, Notify) and decision.kind == events.STOPPED
    by_console = decide(lineage(), attempt(), remote(RemoteStatus.STOPPED, "Stopped"), POLICY, NOW)
    assert by_console == Notify(events.STOPPED, lineage_status=LineageStatus.STOPPED)


def test_completed_gives_the_final_report() -> None:
    decision = decide(lineage(), attempt(), remote(RemoteStatus.COMPLETED), POLICY, NOW)
    assert decision == Notify(events.COMPLETED, lineage_status=LineageStatus.COMPLETED)


def test_a_lost_launch_is_redone_at_once_on_the_same_type() -> None:
    lost = attempt(status=AttemptStatus.LAUNCH_FAILED, remote_status="", secondary_status=LAUNCH_LOST)
    decision = decide(lineage(), lost, remote_from_attempt(lost), POLICY, NOW)
    planned = BatchSettings(32, 1, 1, 1)
    assert decision == Relaunch("ml.p3.2xlarge", True, NOW, 0.0, "the launch never reached the backend",
                                batch=planned, planned=planned)


def test_remote_from_attempt_round_trips_the_mirrored_view() -> None:
    ended = attempt(status=AttemptStatus.STOPPED, remote_status="Stopped", secondary_status="MaxWaitTimeExceeded",
                    billable_seconds=10, training_seconds=40)
    view = remote_from_attempt(ended)
    assert (view.status, view.secondary_status, view.billable_seconds) == (RemoteStatus.STOPPED,
                                                                          "MaxWaitTimeExceeded", 10)
