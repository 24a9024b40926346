"""The endpoints table (created by the baseline revision), the records the service hands out, and the
guarded updates.

An endpoint row is keyed by its name: a name is live (creating or in service) at most once; a failed or
deleted row is replaced when the name is deployed again. Status changes are guarded updates, as for
lineages, so two processes following one endpoint never both announce it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Row

from jobs.clock import Clock
from jobs.endpoints import texts as texts
from jobs.endpoints.options import DeployOptions
from jobs.endpoints.port import DeployRequest, EndpointStatus
from jobs.errors import InvalidState, NotFound, SpecError
from jobs.lineage import Lineage
from jobs.planning.prices import hourly_usd
from jobs.store.schema import endpoints_table, read_transaction, write_transaction
from jobs.store.store import Store

LIVE = (EndpointStatus.CREATING.value, EndpointStatus.IN_SERVICE.value)


@dataclass(frozen=True)
class Endpoint:
    name: str
    lineage_id: str
    job_name: str  # the attempt whose model it serves
    backend: str
    status: EndpointStatus
    remote_status: str  # the backend's own word (Creating, InService, Failed, ...)
    failure_reason: str
    model_name: str
    model_data: str
    task: str
    framework: str  # "transformers 4.28.1 / PyTorch 2.0.0 / py310"; "" for local endpoints
    framework_note: str  # why it differs from the training versions; "" when it does not
    instance_type: str
    instance_count: int
    serverless: bool
    memory_mb: int
    deployed_by: str
    channel: str | None  # where the idle note goes
    invocations: int  # answered through the bot
    created_at: datetime
    updated_at: datetime
    ready_at: datetime | None
    ended_at: datetime | None
    last_invoked_at: datetime | None
    config_name: str = ""  # the endpoint config that serves now ("" on old rows: the endpoint's name)
    updating_revision: int | None = None  # the revision being rolled out, if any

    @property
    def serving_config(self) -> str:
        return self.config_name or self.name

    @property
    def where(self) -> str:
        return texts.where(
            self.instance_type, self.instance_count, self.serverless, self.memory_mb, self.backend
        )

    def hourly_usd(self) -> float | None:
        """What it costs an hour while up: 0 locally, None when unknown (serverless bills per request)."""
        if self.backend == "local":
            return 0.0
        if self.serverless:
            return None
        try:
            return hourly_usd(self.instance_type) * self.instance_count
        except (SpecError, KeyError):
            return None


@dataclass(frozen=True)
class DeployPlan:
    """A checked deploy, not started: the handler answers with it, then starts it off the ack path."""

    lineage: Lineage
    job_name: str  # the attempt whose model is deployed
    request: DeployRequest
    options: DeployOptions
    backend: str
    framework_note: str | None  # set when the inference image differs from the training versions

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def where(self) -> str:
        request = self.request
        return texts.where(
            request.instance_type, request.instance_count, request.serverless, request.memory_mb, self.backend
        )

    def headline(self) -> str:
        framework = self.request.framework
        label = texts.DEPLOYED_FRAMEWORK.format(label=framework.label()) if framework else ""
        return texts.DEPLOYING.format(
            lineage=self.lineage.id, name=self.name, where=self.where, framework=label
        )

    def summary(self) -> str:
        """The headline, where the news will come, and the framework note when there is one."""
        text = f"{self.headline()} {texts.DEPLOY_FOLLOW}"
        return f"{text} {self.framework_note}" if self.framework_note else text


@dataclass(frozen=True)
class IdleEndpoint:
    endpoint: Endpoint
    idle_seconds: float
    hourly_usd: float | None
    running_usd: float | None  # since it came up


@dataclass
class EndpointCycle:
    """What one `poll_once` did."""

    followed: int = 0
    ready: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.followed} followed, {len(self.ready)} ready, {len(self.failed)} failed"


class EndpointStore:
    """Rows of the endpoints table, on the store's engine."""

    def __init__(self, store: Store, *, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    def find(self, name: str) -> Endpoint | None:
        with self._read() as conn:
            row = conn.execute(select(endpoints_table).where(endpoints_table.c.name == name)).first()
        return None if row is None else _to_endpoint(row)

    def get(self, name: str) -> Endpoint:
        found = self.find(name.strip())
        if found is None:
            raise NotFound(
                f"There is no endpoint {name.strip()!r}; `trainbot deploy JOB` (or /deploy JOB) makes one."
            )
        return found

    def list(self, *, include_ended: bool = False) -> list[Endpoint]:
        """Newest first; live ones only unless ``include_ended``."""
        query = select(endpoints_table).order_by(endpoints_table.c.created_at.desc())
        if not include_ended:
            query = query.where(endpoints_table.c.status.in_(LIVE))
        with self._read() as conn:
            return [_to_endpoint(row) for row in conn.execute(query)]

    def create(self, values: dict[str, Any]) -> Endpoint:
        """Record a CREATING endpoint, replacing a failed or deleted one of the same name; InvalidState
        when the name is live."""
        now = self._clock.now()
        values = {
            **values,
            "status": EndpointStatus.CREATING.value,
            "remote_status": "",
            "failure_reason": "",
            "invocations": 0,
            "created_at": now,
            "updated_at": now,
            "config_name": values["name"],  # the SDK and the local backend name the first config so
            "updating_revision": None,
        }
        table = endpoints_table
        with self._write() as conn:
            row = conn.execute(select(table.c.status).where(table.c.name == values["name"])).first()
            if row is not None and row.status in LIVE:
                raise InvalidState(
                    f"Endpoint {values['name']} is already {row.status.replace('_', ' ')}: use it, "
                    f"`/undeploy {values['name']}` first, or pass name=... for a second one."
                )
            conn.execute(delete(table).where(table.c.name == values["name"]))
            conn.execute(insert(table).values(**values))
        return self.get(values["name"])

    def move(self, name: str, expected: tuple[str, ...], new: EndpointStatus, **values: Any) -> bool:
        """Guarded: only from ``expected``; True when this call made the change."""
        stmt = (
            update(endpoints_table)
            .where(endpoints_table.c.name == name, endpoints_table.c.status.in_(expected))
            .values(status=new.value, updated_at=self._clock.now(), **values)
        )
        with self._write() as conn:
            return bool(conn.execute(stmt).rowcount == 1)

    def mirror(self, name: str, remote_status: str, *, if_unset: bool = False) -> None:
        """The backend's own word for the endpoint; ``if_unset``: only where none was recorded yet."""
        stmt = (
            update(endpoints_table)
            .where(endpoints_table.c.name == name)
            .values(remote_status=remote_status, updated_at=self._clock.now())
        )
        if if_unset:
            stmt = stmt.where(endpoints_table.c.remote_status == "")
        with self._write() as conn:
            conn.execute(stmt)

    def claim_update(self, name: str, revision_id: int) -> bool:
        """Guarded: the endpoint in service with no update under way takes ``revision_id`` as its update;
        False when another update (or the endpoint's own creation) holds it."""
        stmt = (
            update(endpoints_table)
            .where(endpoints_table.c.name == name, endpoints_table.c.updating_revision.is_(None),
                   endpoints_table.c.status == EndpointStatus.IN_SERVICE.value)
            .values(updating_revision=revision_id, updated_at=self._clock.now())
        )
        with self._write() as conn:
            return bool(conn.execute(stmt).rowcount == 1)

    def finish_update(self, name: str, revision_id: int, serving: dict[str, Any] | None) -> bool:
        """The update ``revision_id`` is over: ``serving`` (lineage, model, config, instances) is what the
        endpoint serves now, or None when it kept what it had. Guarded by the claim."""
        stmt = (
            update(endpoints_table)
            .where(endpoints_table.c.name == name, endpoints_table.c.updating_revision == revision_id)
            .values(updating_revision=None, updated_at=self._clock.now(), **(serving or {}))
        )
        with self._write() as conn:
            return bool(conn.execute(stmt).rowcount == 1)

    def count_invocation(self, name: str) -> None:
        now = self._clock.now()
        stmt = (
            update(endpoints_table)
            .where(endpoints_table.c.name == name)
            .values(invocations=endpoints_table.c.invocations + 1, last_invoked_at=now, updated_at=now)
        )
        with self._write() as conn:
            conn.execute(stmt)

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)


def _to_endpoint(row: Row[Any]) -> Endpoint:
    values = dict(row._mapping)
    values["status"] = EndpointStatus(values["status"])
    return Endpoint(**values)
