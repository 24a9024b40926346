"""The SageMaker backend: launches the plan through the SDK's `HuggingFace` estimator and reads jobs,
logs and metrics back with plain boto3 calls.

sagemaker is pinned to 2.x (>=2.257,<3): the 3.x line has no `HuggingFace` estimator and no
smdistributed options, which the data- and model-parallel recipes need. The SDK stays inside this
module (and `session`); everything it returns leaves as `jobs.records` data.
"""

from __future__ import annotations

import heapq
import logging
import re
import tempfile
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import boto3
from botocore.exceptions import ClientError

from jobs.backends.archives import ArchiveLimits
from jobs.backends.aws_session import MAX_ATTEMPTS, client_config, endpoint_of, make_boto_session
from jobs.backends.code_sources import CodeMaterializer, GitCodeSources, S3Tarballs
from jobs.backends.hub_token import HubTokenSecret
from jobs.backends.sagemaker.errors import (
    AwsContext,
    aws_errors,
    error_code,
    is_already_exists,
    is_not_found,
    missing_bucket,
)
from jobs.backends.sagemaker.errors import not_found as job_not_found
from jobs.backends.sagemaker.progress import ProgressReader
from jobs.backends.sagemaker.records import aware_utc, job_summary, remote_job
from jobs.backends.sagemaker.session import build_sdk_session, huggingface_estimator
from jobs.clock import Clock
from jobs.errors import ConfigError, SpecError
from jobs.planning import versions
from jobs.planning.hyperparameters import check_launch_hyperparameters
from jobs.records import (
    JobSummary,
    MetricPoint,
    MetricSeries,
    Progress,
    RemoteJob,
)
from jobs.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobs.planning.forecast import ForecastTarget
    from jobs.planning.plan import LaunchPlan

logger = logging.getLogger(__name__)

#: How long a bucket that answered head_bucket is trusted before the next launch asks again.
BUCKET_CHECK_INTERVAL = timedelta(minutes=10)

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
METRIC_NAMESPACE = "/aws/sagemaker/TrainingJobs"
PAGE_SIZE = 100  # ListTrainingJobs' maximum MaxResults
RECENT = timedelta(days=30)  # list_changed(None): longer than SageMaker's 28-day maximum runtime
METRIC_PERIOD_S = 60
_STREAM_EPOCH = re.compile(r"-[0-9]{6,}$")
_HOST_NUMBER = re.compile(r"/algo-([0-9]+)")


class SageMakerBackend:
    """`jobs.backend.TrainingBackend` on Amazon SageMaker."""

    name = "sagemaker"

    def __init__(
        self,
        boto_session: boto3.Session,
        *,
        role_arn: str,
        bucket: str,
        clock: Clock,
        region: str | None = None,
        name_contains: str | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        code_home: Path | None = None,
        code_limits: ArchiveLimits | None = None,
        hub_token_arn: str = "",
    ) -> None:
        if not role_arn:
            raise ConfigError("No SageMaker execution role is set: set TRAINBOT_ROLE_ARN to the role's ARN.")
        if not bucket:
            raise ConfigError("No S3 bucket is set for code and checkpoints: set TRAINBOT_BUCKET.")
        self.region = region or boto_session.region_name or ""
        if not self.region:
            raise ConfigError("No AWS region is set: set AWS_DEFAULT_REGION (e.g. us-east-1).")
        self._boto = boto_session
        self._role_arn = role_arn
        self._bucket = bucket
        self._clock = clock
        self._name_contains = name_contains
        self._config = client_config(max_attempts)
        self._sm = boto_session.client("sagemaker", region_name=self.region, config=self._config)
        self._s3 = boto_session.client("s3", region_name=self.region, config=self._config)
        self._logs = boto_session.client("logs", region_name=self.region, config=self._config)
        self._cw = boto_session.client("cloudwatch", region_name=self.region, config=self._config)
        self._progress = ProgressReader(self._cw, clock)
        # A gated model's token: the job gets the secret's ARN and reads it with its own role (hub_token.py).
        self._hub_token = HubTokenSecret.configured(
            hub_token_arn, lambda where: boto_session.client("secretsmanager", region_name=where, config=self._config))
        self._sdk_session: Any = None
        self._sdk_lock = threading.Lock()
        self._bucket_seen_until: datetime | None = None
        # Teams' own code is checked out (at its pinned commit) and cached here before the SDK uploads it.
        home = code_home or Path(tempfile.gettempdir()) / "trainbot"
        limits = code_limits or ArchiveLimits()  # every tarball and checkout is read member by member, capped
        self._code = CodeMaterializer(home, GitCodeSources(home, limits=limits),
                                      S3Tarballs(home, lambda: self._s3, limits=limits), limits=limits)

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock) -> SageMakerBackend:
        """The bot's backend: the standard AWS chain (AWS_ENDPOINT_URL included), TRAINBOT_ROLE_ARN,
        TRAINBOT_BUCKET, AWS_DEFAULT_REGION."""
        region = settings.aws_region or None
        return cls(
            make_boto_session(region),
            role_arn=settings.trainbot_role_arn,
            bucket=settings.trainbot_bucket,
            clock=clock,
            region=region,
            code_home=settings.trainbot_home,
            code_limits=ArchiveLimits(max_bytes=settings.trainbot_code_max_bytes),
            hub_token_arn=settings.trainbot_hf_token_secret_arn,
        )

    # -- launching ---------------------------------------------------------------------------------

    def launch(self, job_name: str, plan: LaunchPlan) -> None:
        # However the plan was made (stored, replayed, built by hand): no sagemaker_* or other reserved name.
        check_launch_hyperparameters(plan.estimator.get("hyperparameters") or {}, own=plan.spec.own_code)
        ctx = self._ctx(f"launch training job {job_name}", self._sm)
        self._check_bucket(ctx)
        inputs = _input_channels(plan)
        arguments = self._with_image(self._sdk_arguments(plan.estimator))
        if self._hub_token is not None:
            self._hub_token.check_exists()  # a wrong ARN is refused before anything is uploaded
            arguments["environment"] = {**(arguments.get("environment") or {}), **self._hub_token.environment()}
        with aws_errors(ctx, sdk=True):
            estimator = huggingface_estimator(**arguments, role=self._role_arn, sagemaker_session=self._session())
            try:
                estimator.fit(inputs=inputs, wait=False, logs=False, job_name=job_name)
            except ClientError as exc:
                if not is_already_exists(exc):
                    raise
                # A retried launch (after a crash or a timeout) finds its own job: that is success.
                logger.info("training job %s already exists; counted as launched", job_name)
                return
        logger.info("launched SageMaker training job %s", job_name)

    def _sdk_arguments(self, estimator: dict[str, Any]) -> dict[str, Any]:
        """The plan's arguments as the SDK takes them: own code checked out here at its pinned commit (the
        SDK's own git_config cannot pin file:// repositories nor cache a clone), then uploaded by the SDK; a
        folder the SDK tars is uploaded without its debris (``__pycache__``, ``.pyc``, ...)."""
        source = self._code.runnable(estimator, keep_s3=True)
        arguments = {k: v for k, v in estimator.items() if k not in ("git_config", "dependencies")}
        folder = source.source_dir
        if not folder.startswith("s3://"):
            folder = str(self._code.without_debris(Path(folder)))
        arguments.update(source_dir=folder, entry_point=source.entry_point)
        return arguments

    def _with_image(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """An image beyond the SDK's tables, pulled from this region's registry (the plan may name none)."""
        if "image_uri" not in arguments:
            return arguments
        uri = versions.training_image_uri(str(arguments["transformers_version"]), str(arguments["pytorch_version"]),
                                          str(arguments["py_version"]), self.region)
        return {**arguments, "image_uri": uri or arguments["image_uri"]}

    def _session(self) -> Any:
        # Built once, on the first launch: importing and setting up the SDK costs about a second.
        with self._sdk_lock:
            if self._sdk_session is None:
                ctx = self._ctx("set up the SageMaker session", self._sm)
                with aws_errors(ctx, sdk=True):
                    self._sdk_session = build_sdk_session(
                        self._boto, bucket=self._bucket, config=self._config
                    )
            return self._sdk_session

    def _check_bucket(self, ctx: AwsContext) -> None:
        """Fail before anything is uploaded, naming the bucket (the SDK would try to create it).
        A bucket seen recently is not asked about again: it would add a round trip to every launch."""
        now = self._clock.now()
        if self._bucket_seen_until is not None and now < self._bucket_seen_until:
            return
        with aws_errors(ctx):
            try:
                self._s3.head_bucket(Bucket=self._bucket)
            except ClientError as exc:
                if error_code(exc) in ("404", "NoSuchBucket", "NotFound"):
                    raise missing_bucket(self._bucket) from exc
                raise
        self._bucket_seen_until = now + BUCKET_CHECK_INTERVAL

    # -- reading -----------------------------------------------------------------------------------

    def describe(self, job_name: str) -> RemoteJob:
        ctx = self._ctx(f"describe training job {job_name}", self._sm)
        with aws_errors(ctx):
            try:
                response = self._sm.describe_training_job(TrainingJobName=job_name)
            except ClientError as exc:
                if is_not_found(exc):
                    raise job_not_found(job_name, self.region) from exc
                raise
        return remote_job(response)

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        after = since if since is not None else self._clock.now() - RECENT
        request: dict[str, Any] = {
            "LastModifiedTimeAfter": after,
            "PaginationConfig": {"PageSize": PAGE_SIZE},
        }
        if self._name_contains:
            request["NameContains"] = self._name_contains
        found: list[JobSummary] = []
        with aws_errors(self._ctx("list training jobs", self._sm)):
            for page in self._sm.get_paginator("list_training_jobs").paginate(**request):
                found.extend(job_summary(row) for row in page.get("TrainingJobSummaries", []))
        return found

    def stop(self, job_name: str) -> None:
        ctx = self._ctx(f"stop training job {job_name}", self._sm)
        with aws_errors(ctx):
            try:
                self._sm.stop_training_job(TrainingJobName=job_name)
            except ClientError as exc:
                if is_not_found(exc):
                    raise job_not_found(job_name, self.region) from exc
                raise
        logger.info("asked SageMaker to stop %s", job_name)

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]:
        """The last `lines` lines across the job's streams (one per host), oldest first."""
        if lines <= 0:
            return []
        ctx = self._ctx(f"read the logs of {job_name}", self._logs)
        with aws_errors(ctx):
            streams = self._log_streams(job_name)
            tails = [self._stream_tail(stream, lines) for stream in streams]
        merged = heapq.merge(*tails, key=lambda event: event[0])
        return [message for _, message in list(merged)[-lines:]]

    def host_log_tails(self, job_name: str, lines: int) -> list[tuple[str, list[str]]]:
        """The last `lines` lines of each host's stream, labelled by host (`algo-1`, `algo-2`, ...)."""
        if lines <= 0:
            return []
        ctx = self._ctx(f"read the logs of {job_name}", self._logs)
        with aws_errors(ctx):
            streams = sorted(self._log_streams(job_name), key=_host_order)
            tails = [(stream, self._stream_tail(stream, lines)) for stream in streams]
        labels = host_labels(job_name, streams)
        return [(labels[stream], [message for _, message in events]) for stream, events in tails]

    def _log_streams(self, job_name: str) -> list[str]:
        names: list[str] = []
        paginator = self._logs.get_paginator("describe_log_streams")
        try:
            # Streams are "<job>/algo-<n>-<epoch>"; the slash keeps job "x-1" from matching "x-10".
            for page in paginator.paginate(logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job_name}/"):
                names.extend(stream["logStreamName"] for stream in page.get("logStreams", []))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []  # no job has logged in this region yet
            raise
        return names

    def _stream_tail(self, stream: str, lines: int) -> list[tuple[int, str]]:
        response = self._logs.get_log_events(
            logGroupName=LOG_GROUP, logStreamName=stream, limit=lines, startFromHead=False
        )
        return [(event["timestamp"], event["message"].rstrip("\n")) for event in response.get("events", [])]

    def metric_series(self, job_name: str) -> MetricSeries:
        """The job's metric-definition series; x is seconds since training started."""
        job = self.describe(job_name)
        start = job.started_at or job.created_at or self._clock.now() - RECENT
        end = (job.ended_at or self._clock.now()) + timedelta(seconds=METRIC_PERIOD_S)
        ctx = self._ctx(f"read the metrics of {job_name}", self._cw)
        with aws_errors(ctx):
            names = self._metric_names(job_name)
            if not names:
                return {}
            results = self._metric_data(job_name, names, start - timedelta(seconds=METRIC_PERIOD_S), end)
        return {
            name: sorted(
                (MetricPoint(x=_seconds_since(start, at), value=float(value)) for at, value in pts),
                key=lambda point: point.x,
            )
            for name, pts in results.items()
            if pts
        }

    def _metric_names(self, job_name: str) -> list[str]:
        names: set[str] = set()
        dimension = [{"Name": "TrainingJobName", "Value": job_name}]
        for page in self._cw.get_paginator("list_metrics").paginate(
            Namespace=METRIC_NAMESPACE, Dimensions=dimension
        ):
            names.update(metric["MetricName"] for metric in page.get("Metrics", []))
        return sorted(names)

    def _metric_data(
        self, job_name: str, names: list[str], start: datetime, end: datetime
    ) -> dict[str, list[tuple[datetime, float]]]:
        queries = [_metric_query(f"m{i}", name, job_name) for i, name in enumerate(names)]
        by_id = {query["Id"]: name for query, name in zip(queries, names, strict=True)}
        found: dict[str, list[tuple[datetime, float]]] = {name: [] for name in names}
        # GetMetricData takes up to 500 queries per call.
        for offset in range(0, len(queries), 500):
            paginator = self._cw.get_paginator("get_metric_data")
            for page in paginator.paginate(
                MetricDataQueries=queries[offset : offset + 500], StartTime=start, EndTime=end
            ):
                for result in page.get("MetricDataResults", []):
                    points = zip(result.get("Timestamps", []), result.get("Values", []), strict=False)
                    found[by_id[result["Id"]]].extend(points)
        return found

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        """Step, loss and pace of each running job, from GetMetricData calls of up to 500 queries each
        (jobs.backends.sagemaker.progress)."""
        with aws_errors(self._ctx("read the progress of running jobs", self._cw)):
            return self._progress.progress(job_names)

    # -- links and notes ---------------------------------------------------------------------------

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        region = self.region
        console = f"https://{region}.console.aws.amazon.com"
        log_group = quote(quote(LOG_GROUP, safe=""), safe="").replace("%", "$")
        stream_filter = quote(quote(f"?logStreamNameFilter={job_name}/", safe=""), safe="").replace("%", "$")
        links = {
            "job": f"{console}/sagemaker/home?region={region}#/jobs/{job_name}",
            "logs": f"{console}/cloudwatch/home?region={region}#logsV2:log-groups/log-group/{log_group}"
            f"/log-events{stream_filter}",
        }
        if model_artifacts and model_artifacts.startswith("s3://"):
            # The folder DescribeTrainingJob's ModelArtifacts names, wherever the plan put the output.
            bucket, _, key = model_artifacts.removeprefix("s3://").partition("/")
            folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
            links["model"] = (f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}"
                              f"?region={region}&prefix={quote(folder)}")
        return links

    def scaling_note(self, plan: LaunchPlan) -> str | None:
        return None  # SageMaker runs the plan as written

    def forecast_target(self, plan: LaunchPlan) -> ForecastTarget | None:
        return None  # the plan's own forecast is this backend's

    def _ctx(self, action: str, client: Any) -> AwsContext:
        return AwsContext(
            action=action, endpoint=endpoint_of(client), role_arn=self._role_arn, bucket=self._bucket
        )


def _input_channels(plan: LaunchPlan) -> dict[str, str] | None:
    """The plan's fit() channels (only when the spec names training data; the scripts fetch hub
    datasets themselves). SageMaker reads channels from S3 only."""
    inputs = dict(plan.inputs or {})
    for channel, uri in inputs.items():
        if not uri.startswith("s3://"):
            raise SpecError(f"On SageMaker the {channel} data must be an s3:// prefix, not {uri!r}.")
    return inputs or None


def host_labels(job_name: str, streams: list[str]) -> dict[str, str]:
    """`<job>/algo-2-1700000000` -> `algo-2`; a host with several streams (SageMaker restarted it) keeps
    the stream's suffix, so each label names one stream."""
    hosts = {stream: stream.removeprefix(f"{job_name}/") for stream in streams}
    short = {stream: _STREAM_EPOCH.sub("", name) for stream, name in hosts.items()}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {stream: short[stream] if counts[short[stream]] == 1 else hosts[stream] for stream in streams}


def _host_order(stream: str) -> tuple[int, str]:
    found = _HOST_NUMBER.search(stream)
    return (int(found.group(1)) if found else 0, stream)


def _metric_query(query_id: str, name: str, job_name: str) -> dict[str, Any]:
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": METRIC_NAMESPACE,
                "MetricName": name,
                "Dimensions": [{"Name": "TrainingJobName", "Value": job_name}],
            },
            "Period": METRIC_PERIOD_S,
            "Stat": "Average",
        },
        "ReturnData": True,
    }


def _seconds_since(start: datetime, at: datetime) -> float:
    # CloudWatch stamps each point with the start of its 60 s period, which may precede the start.
    return max(0.0, (aware_utc(at) - aware_utc(start)).total_seconds())
