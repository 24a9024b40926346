"""Reading jobs back from SageMaker (moto): describe, changed jobs, log tails, metric series, stop, links."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from moto.backends import get_backend

from jobs.backends.sagemaker.training_jobs import LOG_GROUP, METRIC_NAMESPACE, SageMakerBackend
from jobs.errors import BackendError, NotFound
from jobs.records import MetricPoint, RemoteStatus
from jobs.settings import Settings
from tests.support.clock import FakeClock
from tests.support.moto_server import (
    ACCOUNT_ID,
    REGION,
    CallRecorder,
    MotoAws,
    ago,
    sagemaker_backend,
    set_training_job_state,
    set_training_job_times,
)


def _create_jobs(aws: MotoAws, names: list[str]) -> None:
    """Arrange jobs straight in moto's backend, tagged as the bot tags what it launches: a launch per job would
    take a second each."""
    backend = get_backend("sagemaker")[ACCOUNT_ID][REGION]
    for name in names:
        backend.create_training_job(
            training_job_name=name,
            hyper_parameters={},
            role_arn=aws.role_arn,
            algorithm_specification={"TrainingImage": "img", "TrainingInputMode": "File"},
            input_data_config=[],
            output_data_config={"S3OutputPath": f"s3://{aws.bucket}/out"},
            resource_config={"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            vpc_config={},
            stopping_condition={"MaxRuntimeInSeconds": 1000, "MaxWaitTimeInSeconds": 3600},
            tags=[{"Key": "trainbot:lineage", "Value": name.rsplit("-", 1)[0]}],
            enable_network_isolation=False,
            enable_inter_container_traffic_encryption=False,
            enable_managed_spot_training=True,
            checkpoint_config={"S3Uri": f"s3://{aws.bucket}/ck"},
            debug_hook_config={},
            debug_rule_configurations=[],
            tensor_board_output_config={},
            experiment_config={},
        )


@pytest.fixture
def backend(moto_aws: MotoAws) -> SageMakerBackend:
    return sagemaker_backend(moto_aws)  # type: ignore[no-any-return]


def test_describe_reports_an_interrupted_spot_job(moto_aws: MotoAws, backend: SageMakerBackend) -> None:
    _create_jobs(moto_aws, ["read-spot-1"])
    set_training_job_state("read-spot-1", "InProgress", "Training")
    set_training_job_state("read-spot-1", "InProgress", "Interrupted")
    job = backend.describe("read-spot-1")
    assert (job.status, job.secondary_status) == (RemoteStatus.IN_PROGRESS, "Interrupted")
    assert [t.status for t in job.transitions] == ["Starting", "Training", "Interrupted"]
    assert job.transitions[1].end is not None and job.transitions[2].end is None
    assert job.ended_at is None and job.spot is True
    assert (job.instance_type, job.instance_count) == ("ml.p3.2xlarge", 1)
    assert job.created_at is not None and job.created_at.tzinfo == timezone.utc


def test_describe_reports_the_end_of_a_job(moto_aws: MotoAws, backend: SageMakerBackend) -> None:
    _create_jobs(moto_aws, ["read-done-1", "read-failed-1"])
    set_training_job_state(
        "read-done-1",
        "Completed",
        billable_seconds=300,
        training_seconds=1000,
        final_metrics={"eval_accuracy": 0.91, "loss": 0.2},
    )
    set_training_job_state("read-failed-1", "Failed", failure_reason="AlgorithmError: ExecuteUserScriptError")
    done, failed = backend.describe("read-done-1"), backend.describe("read-failed-1")
    assert done.status is RemoteStatus.COMPLETED and (done.billable_seconds, done.training_seconds) == (
        300,
        1000,
    )
    assert done.final_metrics == {"eval_accuracy": 0.91, "loss": 0.2}
    assert done.model_artifacts == f"s3://{moto_aws.bucket}/out/read-done-1/output/model.tar.gz"
    assert done.ended_at is not None
    assert failed.status is RemoteStatus.FAILED
    assert failed.failure_reason == "AlgorithmError: ExecuteUserScriptError"


def test_describe_of_an_unknown_job_is_not_found(backend: SageMakerBackend) -> None:
    with pytest.raises(NotFound, match="no-such-job"):
        backend.describe("no-such-job")


def test_list_changed_reads_every_page_and_only_changed_jobs(moto_aws: MotoAws) -> None:
    old = [f"page-old-{i}" for i in range(60)]
    new = [f"page-new-{i}" for i in range(150)]
    _create_jobs(moto_aws, old + new)
    for name in old:
        set_training_job_times(name, created=ago(7200), modified=ago(7200))
    recorder = CallRecorder("ListTrainingJobs")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), name_contains="page-")
    found = backend.list_changed(ago(3600))
    assert sorted(summary.name for summary in found) == sorted(new)
    assert all(summary.status is RemoteStatus.COMPLETED for summary in found)
    # Every page asked for 100 rows since the cursor; moto pages before filtering, so it has
    # ceil(all jobs / 100) pages and each was read.
    total = len(get_backend("sagemaker")[ACCOUNT_ID][REGION].training_jobs)
    assert len(recorder.calls) == math.ceil(total / 100) >= 3
    for call in recorder.calls:
        assert call["MaxResults"] == 100 and call["NameContains"] == "page-"
        assert call["LastModifiedTimeAfter"] == pytest.approx(ago(3600).timestamp(), abs=60)


def test_list_changed_without_a_cursor_covers_the_last_month(moto_aws: MotoAws) -> None:
    _create_jobs(moto_aws, ["recent-1"])
    now = datetime.now(timezone.utc)
    recorder = CallRecorder("ListTrainingJobs")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), clock=FakeClock(now))
    assert "recent-1" in {summary.name for summary in backend.list_changed(None)}
    assert recorder.calls[0]["LastModifiedTimeAfter"] == pytest.approx((now - timedelta(days=30)).timestamp())


@pytest.fixture
def logged_job(moto_aws: MotoAws) -> Iterator[str]:
    logs = moto_aws.client("logs")
    if not logs.describe_log_groups(logGroupNamePrefix=LOG_GROUP)["logGroups"]:
        logs.create_log_group(logGroupName=LOG_GROUP)
    if logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix="logs-1/")["logStreams"]:
        yield "logs-1"  # the module's moto server has them from an earlier test
        return
    base = int(ago(600).timestamp() * 1000)
    for stream, offset in (
        ("logs-1/algo-1-1700000000", 0),
        ("logs-1/algo-2-1700000000", 5),
        ("logs-10/algo-1-1", 7),
    ):
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        events = [
            {"timestamp": base + i * 10 + offset, "message": f"{stream.split('/')[1][:6]} line {i}\n"}
            for i in range(30)
        ]
        logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)
    yield "logs-1"


def test_log_tail_merges_the_hosts_streams_in_time_order(backend: SageMakerBackend, logged_job: str) -> None:
    assert backend.log_tail(logged_job, 4) == [
        "algo-1 line 28",
        "algo-2 line 28",
        "algo-1 line 29",
        "algo-2 line 29",
    ]
    assert len(backend.log_tail(logged_job, 40)) == 40  # across both hosts, not the other job "logs-10"
    assert backend.log_tail("no-logs-yet", 10) == []


def test_host_log_tails_label_each_host_of_a_multi_instance_job(backend: SageMakerBackend, logged_job: str) -> None:
    tails = backend.host_log_tails(logged_job, 3)
    assert tails == [
        ("algo-1", ["algo-1 line 27", "algo-1 line 28", "algo-1 line 29"]),
        ("algo-2", ["algo-2 line 27", "algo-2 line 28", "algo-2 line 29"]),
    ]
    assert backend.host_log_tails("no-logs-yet", 10) == []


def test_a_host_with_several_streams_keeps_each_streams_suffix() -> None:
    from jobs.backends.sagemaker.training_jobs import host_labels

    streams = ["j-1/algo-1-1700000000", "j-1/algo-1-1700000900", "j-1/algo-2-1700000000"]
    assert host_labels("j-1", streams) == {
        "j-1/algo-1-1700000000": "algo-1-1700000000",
        "j-1/algo-1-1700000900": "algo-1-1700000900",
        "j-1/algo-2-1700000000": "algo-2",
    }


def test_metric_series_are_seconds_since_the_start(moto_aws: MotoAws, backend: SageMakerBackend) -> None:
    _create_jobs(moto_aws, ["metrics-1"])
    start = ago(3600).replace(second=0, microsecond=0)
    set_training_job_times("metrics-1", created=start, started=start)
    set_training_job_state("metrics-1", "Completed", at=start + timedelta(minutes=10))
    dimension = [{"Name": "TrainingJobName", "Value": "metrics-1"}]
    moto_aws.client("cloudwatch").put_metric_data(
        Namespace=METRIC_NAMESPACE,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": dimension,
                "Timestamp": start + timedelta(minutes=minute),
                "Value": value,
            }
            for name, points in {"loss": [(1, 2.0), (2, 1.5), (3, 1.0)], "eval_accuracy": [(3, 0.8)]}.items()
            for minute, value in points
        ],
    )
    series = backend.metric_series("metrics-1")
    assert series["loss"] == [MetricPoint(60.0, 2.0), MetricPoint(120.0, 1.5), MetricPoint(180.0, 1.0)]
    assert series["eval_accuracy"] == [MetricPoint(180.0, 0.8)]
    _create_jobs(moto_aws, ["metrics-none-1"])
    assert backend.metric_series("metrics-none-1") == {}


def test_stop_sends_stop_training_job(moto_aws: MotoAws) -> None:
    # moto has no StopTrainingJob (HTTP 500), so the request is what can be checked, and the refusal.
    _create_jobs(moto_aws, ["stop-me-1"])
    recorder = CallRecorder("StopTrainingJob")
    session = moto_aws.boto_session(recorders=[recorder], max_attempts=2)
    backend = sagemaker_backend(moto_aws, session, max_attempts=2)
    with pytest.raises(BackendError, match="stop training job stop-me-1"):
        backend.stop("stop-me-1")
    assert recorder.calls[0] == {"TrainingJobName": "stop-me-1"}


def test_console_links_point_at_the_region_job_logs_and_model(
    backend: SageMakerBackend, moto_aws: MotoAws
) -> None:
    artifacts = f"s3://{moto_aws.bucket}/trainbot/lin-a/output/lin-a-1/output/model.tar.gz"
    links = backend.console_links("lin-a-1", artifacts)
    assert (
        links["job"]
        == f"https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/lin-a-1"
    )
    assert links["logs"].startswith(
        f"https://{REGION}.console.aws.amazon.com/cloudwatch/home?region={REGION}#logsV2:"
    )
    assert "$252Faws$252Fsagemaker$252FTrainingJobs" in links["logs"] and "lin-a-1" in links["logs"]
    assert links["model"] == (
        f"https://s3.console.aws.amazon.com/s3/buckets/{moto_aws.bucket}?region={REGION}"
        "&prefix=trainbot/lin-a/output/lin-a-1/output/"
    )
    assert "model" not in backend.console_links("lin-a-1")  # never a guess
    assert backend.scaling_note(None) is None  # type: ignore[arg-type]


def test_from_settings_uses_the_role_bucket_and_region(moto_aws: MotoAws) -> None:
    settings = Settings(trainbot_role_arn=moto_aws.role_arn, trainbot_bucket=moto_aws.bucket)
    backend = SageMakerBackend.from_settings(settings, clock=FakeClock())
    assert (backend.name, backend.region) == ("sagemaker", REGION)
    _create_jobs(moto_aws, ["settings-1"])
    assert backend.describe("settings-1").name == "settings-1"


def test_the_sdk_session_has_telemetry_off_and_the_bucket(moto_aws: MotoAws) -> None:
    from jobs.backends.aws_session import client_config
    from jobs.backends.sagemaker.session import build_sdk_session

    session = build_sdk_session(moto_aws.boto_session(), bucket=moto_aws.bucket, config=client_config())
    from sagemaker.config.config_schema import TELEMETRY_OPT_OUT_PATH  # after the session: quietly imported
    from sagemaker.utils import resolve_value_from_config

    assert resolve_value_from_config(None, TELEMETRY_OPT_OUT_PATH, False, session) is True
    assert session.default_bucket() == moto_aws.bucket
