"""Settings, read once at start from the environment and passed down (no module singletons)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

IdList = Annotated[tuple[str, ...], NoDecode]
PathList = Annotated[tuple[Path, ...], NoDecode]

#: The reconciliation poll's default interval when EventBridge pushes the changes (TRAINBOT_EVENTS_QUEUE).
EVENTS_POLL_SECONDS = 300.0


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", frozen=True)

    # Slack
    slack_bot_token: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"

    # AWS (credentials come from boto3's standard chain, never from here)
    trainbot_role_arn: str = ""
    trainbot_bucket: str = ""
    aws_region: str = Field(default="", validation_alias="AWS_DEFAULT_REGION")

    # The bot
    trainbot_backend: Literal["sagemaker", "local"] | None = None
    trainbot_home: Path = Path(".trainbot")
    trainbot_database_url: str = ""
    trainbot_poll_seconds: float = Field(default=30, gt=0)
    # SageMaker's state changes pushed through EventBridge into this SQS queue (a URL or a name); the poll
    # then only reconciles, every EVENTS_POLL_SECONDS unless TRAINBOT_POLL_SECONDS is set.
    trainbot_events_queue: str = ""
    trainbot_allowed_users: IdList = ()
    trainbot_allowed_channels: IdList = ()
    trainbot_admins: IdList = ()
    trainbot_max_instances: int = Field(default=16, ge=1)
    trainbot_max_job_usd: float | None = Field(default=None, gt=0)
    trainbot_daily_budget_usd: float | None = Field(default=None, gt=0)
    # The most one endpoint may cost an hour, all its instances together; None: no cap.
    trainbot_max_endpoint_usd_per_hour: float | None = Field(default=None, gt=0)
    trainbot_relaunch_backoff_seconds: float = Field(default=30, ge=0)
    trainbot_max_restarts: int = Field(default=5, ge=0)
    # Where relaunches may move a lineage (jobs.planning.fallbacks): other types with the planned accelerator
    # count (default), also types with more (the global batch kept), or the planned type only.
    trainbot_recovery_policy: Literal["same-count", "any-count", "same-type"] = "same-count"
    # Live progress of running jobs (step, loss, ETA, cost on their cards) is read at most this often.
    trainbot_progress_seconds: float = Field(default=60, gt=0)
    trainbot_endpoint_idle_hours: float = Field(default=24, gt=0)
    # Completed models registered as model packages: in SageMaker's Model Registry on the SageMaker backend
    # (and in the store); "off" keeps the records in the store only.
    trainbot_registry: Literal["on", "off"] = "on"
    # A schedule missed while the bot was down still runs (once) if the bot is back within this.
    trainbot_schedule_grace_seconds: float = Field(default=3600, ge=0)
    # Several bots on one store: one of them runs the schedules under a lease it renews; if it dies, another
    # takes over this long after its last renewal.
    trainbot_scheduler_lease_seconds: float = Field(default=60, gt=0)
    # Local jobs train the tiny offline model unless hub models are asked for (and the hub is reachable).
    trainbot_local_hub: bool = False
    hf_hub_offline: bool = False
    # Besides TRAINBOT_HOME/data, the folders whose files local jobs may read (model=, train_data=, ...).
    trainbot_local_data_dirs: PathList = ()
    # Own code (code=): the URL prefixes it may come from; empty refuses own code.
    trainbot_code_sources: IdList = ()
    # The most one tree of own code may unpack to (a tarball, a git checkout, the packed source dir), in bytes
    # (suffixes KB, MB, GB read as powers of 1000).
    trainbot_code_max_bytes: int = Field(default=500_000_000, gt=0)
    # Local jobs run in a bubblewrap sandbox: auto (when bwrap works here), bwrap (required) or off. Without
    # one, serve and the CLI refuse own code (code=) on the local backend; the console may run it.
    trainbot_local_sandbox: Literal["auto", "bwrap", "off"] = "auto"
    # The host uid a root bot's local jobs run as (their user namespace maps onto it); a bot that is not root
    # runs them as its own uid. Never 0.
    trainbot_local_job_uid: int = Field(default=65534, ge=1)
    # What each local job may take (jobs/backends/local/limits.py): memory with its /tmp and /dev/shm (default:
    # half of this machine's), each of those tmpfs, processes and threads, CPU weight (relative, 100 is even),
    # what its folders may grow by, and the free disk it may never take the bot's home under (a launch with
    # less is refused).
    trainbot_local_memory_mb: int | None = Field(default=None, ge=64)
    trainbot_local_tmpfs_mb: int = Field(default=1024, ge=1)
    trainbot_local_max_processes: int = Field(default=1024, ge=16)
    trainbot_local_cpu_weight: int = Field(default=100, ge=1, le=10000)
    trainbot_local_disk_mb: int = Field(default=20_000, ge=1)
    trainbot_local_disk_free_mb: int = Field(default=1024, ge=0)
    # Team recipes kept in git: a read-only YAML file of name -> /train arguments.
    trainbot_recipes_file: Path | None = None
    # What one person may hold (admins and the CLI included), so nobody fills the store or the scheduler.
    trainbot_max_schedules_per_user: int = Field(default=10, ge=1)
    trainbot_max_subscriptions_per_user: int = Field(default=20, ge=1)
    trainbot_max_recipes_per_user: int = Field(default=20, ge=1)
    # A schedule may fire at most this often (minutes between two runs); cron="* * * * *" is refused.
    trainbot_min_schedule_minutes: float = Field(default=60, ge=0)
    # /logs (and the Logs button) a person may ask for a minute, admins included (two at once after a quiet
    # spell): each reads a log and may upload a file into a job's thread.
    trainbot_max_logs_per_minute: float = Field(default=4, gt=0)
    # A Secrets Manager secret holding a Hugging Face token (gated models): it reaches the job's environment
    # only (jobs/backends/hub_token.py), never a message, a hyperparameter or a log line.
    trainbot_hf_token_secret_arn: str = ""

    @field_validator("trainbot_home")
    @classmethod
    def _absolute_home(cls, value: Path) -> Path:
        # Local jobs run in folders of their own; a relative home would mean another folder there.
        return value.expanduser().resolve()

    @field_validator("trainbot_local_data_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: object) -> object:
        if isinstance(value, str):
            parts = re.split(f"[,{re.escape(os.pathsep)}]", value)
            return tuple(Path(part.strip()).expanduser().resolve() for part in parts if part.strip())
        return value

    @field_validator(
        "trainbot_allowed_users", "trainbot_allowed_channels", "trainbot_admins", "trainbot_code_sources", mode="before"
    )
    @classmethod
    def _split_ids(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.replace(";", ",").split(",") if part.strip())
        return value

    @field_validator("trainbot_code_max_bytes", mode="before")
    @classmethod
    def _byte_size(cls, value: object) -> object:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]?)b?\s*", value.lower())
            if match:
                number, unit = match.groups()
                return int(float(number) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[unit])
        return value

    @field_validator("trainbot_registry", mode="before")
    @classmethod
    def _on_off(cls, value: object) -> object:
        if isinstance(value, str):
            word = value.strip().lower()
            return {"yes": "on", "true": "on", "1": "on", "no": "off", "false": "off", "0": "off"}.get(word, word)
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _trailing_slash(cls, value: str) -> str:
        # slack_sdk's WebClient joins method names onto base_url without adding a slash.
        return value if value.endswith("/") else value + "/"

    @property
    def has_slack(self) -> bool:
        return self.slack_bot_token is not None and (
            self.slack_app_token is not None or self.slack_signing_secret is not None
        )

    @property
    def backend(self) -> Literal["sagemaker", "local"]:
        """The configured backend; SageMaker only when a role is set, local otherwise."""
        if self.trainbot_backend:
            return self.trainbot_backend
        return "sagemaker" if self.trainbot_role_arn else "local"

    @property
    def watch_seconds(self) -> float:
        """How often the full watch cycle runs: TRAINBOT_POLL_SECONDS when set; otherwise 30 s, or
        EVENTS_POLL_SECONDS when events push the changes and the cycle only reconciles what they missed."""
        if "trainbot_poll_seconds" in self.model_fields_set or not self.uses_events:
            return self.trainbot_poll_seconds
        return EVENTS_POLL_SECONDS

    @property
    def uses_events(self) -> bool:
        """Events push job changes: a queue is set and the jobs run on SageMaker (it sends the events)."""
        return bool(self.trainbot_events_queue) and self.backend == "sagemaker"

    @property
    def registry_on(self) -> bool:
        return self.trainbot_registry == "on"

    @property
    def local_uses_hub(self) -> bool:
        return self.trainbot_local_hub and not self.hf_hub_offline

    @property
    def local_data_roots(self) -> tuple[Path, ...]:
        """The folders local jobs may read data and models from: TRAINBOT_HOME/data and TRAINBOT_LOCAL_DATA_DIRS."""
        return (self.trainbot_home / "data", *self.trainbot_local_data_dirs)

    @property
    def database_url(self) -> str:
        if self.trainbot_database_url:
            return self.trainbot_database_url
        return f"sqlite:///{self.trainbot_home / 'trainbot.db'}"
