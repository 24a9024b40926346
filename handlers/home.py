"""The App Home (and `/home` in the console): a person's running jobs with their step, cost so far and a Stop
button; their recent ended jobs; the team's spend today and this week against the daily budget; the live
endpoints with their hourly cost (an Undeploy button where the person may); the schedules with their next run.

`HomeRefresher` publishes it when the person opens the tab and again when one of their jobs changes state:
it compares each viewer's jobs every tick and publishes at most once per `min_interval` a person and
`max_per_tick` people a tick, so a burst of changes is one publish and views.publish stays within its limit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from handlers import blocks as bk
from handlers import cards, endpoints, texts
from handlers.chat import ChatUnavailable, HomeChat, Reply
from handlers.context import CommandContext, Services
from jobs.budget import SpendLedger
from jobs.errors import PermissionDenied, TrainbotError
from jobs.lifecycle.progress import LiveProgress
from jobs.lineage import Lineage
from jobs.planning.prices import usd
from jobs.rate_limits import Priority, prioritised
from jobs.records import Actor
from jobs.reporting.spend import lineage_cost_so_far, team_spend
from jobs.store.runs import RunHistory

log = logging.getLogger(__name__)

RUNNING_SHOWN = 10  # at most, on the Home tab; fewer in a message (/home), see _Room
RECENT_SHOWN = 5
ENDPOINTS_SHOWN = 10
SCHEDULES_SHOWN = 15
LINEAGES_READ = 500  # recent lineages a home (or a refresher tick) reads
HOME_MIN_INTERVAL = 10.0  # seconds between two publishes of one person's home on job changes
HOME_TICK_SECONDS = 5.0
HOME_MAX_PER_TICK = 8  # views.publish allows about 100 a minute: 8 every 5 s stays under it


# ---------------------------------------------------------------- the view


def handle_home(ctx: CommandContext, text: str) -> Reply:
    """`/home`: the home tab as a message (the console has no tab), within a message's 50 blocks."""
    return Reply(text=texts.HOME_TITLE, blocks=home_blocks(ctx.services, ctx.actor, surface=bk.MESSAGE))


def on_undeploy(ctx: CommandContext, value: str) -> Reply | None:
    """The home tab's Undeploy button: its value is the endpoint's name."""
    return endpoints.handle_undeploy(ctx, value)


def home_view(services: Services, actor: Actor) -> dict[str, Any]:
    return bk.home_view(home_blocks(services, actor, surface=bk.HOME), cut_note=texts.BLOCKS_CUT)


@dataclass(frozen=True)
class _Room:
    """How many running jobs and endpoints (two blocks each at most) a surface has room for: what is left of
    its blocks once every section's frame is drawn, the running jobs first."""

    running: int
    endpoints: int

    @classmethod
    def on(cls, surface: bk.Surface, running: int) -> _Room:
        room = surface.max_blocks - _FRAME_BLOCKS
        shown_running = min(RUNNING_SHOWN, room // 4, running)
        return cls(running=shown_running, endpoints=min(ENDPOINTS_SHOWN, (room - 2 * shown_running) // 2))


#: The blocks of the page that are not one per job or endpoint: the title and its line; each of the five
#: sections' divider and heading; the running jobs' and endpoints' "and N more" lines; the recent jobs',
#: the spend's and the schedules' one section each.
_FRAME_BLOCKS = 2 + 5 * 2 + 2 + 3


def home_blocks(services: Services, actor: Actor, *, surface: bk.Surface = bk.HOME) -> list[bk.Block]:
    """The page, within ``surface``'s blocks (lists show what fits and say how many more there are); a
    person outside TRAINBOT_ALLOWED_USERS gets the refusal sentence alone."""
    try:
        services.jobs.policy.check_can_use(actor)
    except PermissionDenied as exc:
        return [bk.header(texts.HOME_TITLE), bk.section(bk.escape(exc.user_message()))]
    now = services.clock.now()
    mine = [ln for ln in services.store.list_lineages(limit=LINEAGES_READ) if ln.launched_by == actor.user_id]
    body: list[bk.Block] = [
        bk.header(texts.HOME_TITLE),
        bk.context(texts.HOME_UPDATED.format(who=cards.mention(actor.user_id), at=_when(now))),
    ]
    running = [ln for ln in mine if not ln.status.is_terminal()]
    room = _Room.on(surface, len(running))
    body += _running(services, running, now, room.running)
    body += _recent([ln for ln in mine if ln.status.is_terminal()], now)
    body += _spend(services, now)
    body += _endpoints(services, actor, room.endpoints, surface)
    body += _schedules(services)
    return bk.message(body, limit=surface.max_blocks, cut_note=texts.BLOCKS_CUT)


def _running(services: Services, running: list[Lineage], now: datetime, shown: int) -> list[bk.Block]:
    blocks: list[bk.Block] = [bk.divider(), bk.section(f"*{texts.HOME_RUNNING}*")]
    if not running:
        return [*blocks, bk.context(texts.HOME_RUNNING_NONE)]
    steps = _steps(services, running[:shown])
    for lineage in running[:shown]:
        spec = lineage.spec
        blocks.append(bk.section(texts.HOME_RUNNING_LINE.format(
            lineage=lineage.id, status=cards.status_word(lineage.status.value), model=bk.escape(spec.model_label),
            count=spec.instance_count, instance=spec.instance_type, spot=" spot" if spec.spot else "",
            step=steps.get(lineage.id, ""), cost=usd(lineage_cost_so_far(lineage, now)))))
        blocks.append(bk.actions([cards.stop_button(lineage.id)], block_id=f"home.running.{lineage.id}"))
    more = bk.more(len(running) - shown, texts.HOME_MORE_RUNNING)
    return blocks + ([more] if more else [])


def _steps(services: Services, running: list[Lineage]) -> dict[str, str]:
    """`` · step 120/400`` of each running job whose live progress the watcher has kept (one query for all:
    no backend call while the tab is drawn)."""
    stored = RunHistory(services.store, services.clock).progress_of(lineage.id for lineage in running)
    steps = {}
    for lineage_id, data in stored.items():
        live = LiveProgress.from_json(data)
        if live.step is not None:
            steps[lineage_id] = texts.HOME_STEP.format(step=live.step, total=live.total or "?")
    return steps


def _recent(ended: list[Lineage], now: datetime) -> list[bk.Block]:
    blocks: list[bk.Block] = [bk.divider(), bk.section(f"*{texts.HOME_RECENT}*")]
    if not ended:
        return [*blocks, bk.context(texts.HOME_RECENT_NONE)]
    lines = [texts.HOME_RECENT_LINE.format(
        lineage=lineage.id, status=cards.status_word(lineage.status.value), model=bk.escape(lineage.spec.model_label),
        cost=usd(lineage_cost_so_far(lineage, now)), ended=_when(_ended_at(lineage)))
        for lineage in ended[:RECENT_SHOWN]]
    return [*blocks, bk.section("\n".join(lines))]


def _ended_at(lineage: Lineage) -> datetime:
    ends = [a.ended_at for a in lineage.attempts if a.ended_at is not None]
    return max(ends) if ends else lineage.updated_at


def _spend(services: Services, now: datetime) -> list[bk.Block]:
    ledger = SpendLedger.from_settings(services.store, services.clock, services.settings)
    spend = team_spend(services.store, ledger, now, daily_budget_usd=services.settings.trainbot_daily_budget_usd)
    lines = [texts.HOME_SPEND_LINE.format(today=usd(spend.today_usd), week=usd(spend.week_usd))]
    if spend.daily_budget_usd:
        lines.append(texts.HOME_BUDGET_LINE.format(
            committed=usd(spend.committed_today_usd), budget=usd(spend.daily_budget_usd),
            pct=100.0 * spend.committed_today_usd / spend.daily_budget_usd))
    else:
        lines.append(texts.HOME_NO_BUDGET)
    return [bk.divider(), bk.section(f"*{texts.HOME_SPEND}*\n" + "\n".join(lines))]


def _endpoints(services: Services, actor: Actor, shown: int, surface: bk.Surface) -> list[bk.Block]:
    blocks: list[bk.Block] = [bk.divider(), bk.section(f"*{texts.HOME_ENDPOINTS}*")]
    live = services.endpoints.list() if services.endpoints is not None else []
    if not live:
        return [*blocks, bk.context(texts.HOME_ENDPOINTS_NONE)]
    for endpoint in live[:shown]:
        hourly = endpoint.hourly_usd()
        lineage = _lineage_or_none(services, endpoint.lineage_id)
        # Another person's job is not named on this person's home: the endpoint and who deployed it are.
        source = endpoint.lineage_id if lineage is not None and lineage.launched_by == actor.user_id \
            else cards.mention(endpoint.deployed_by)
        blocks.append(bk.section(texts.HOME_ENDPOINT_LINE.format(
            name=bk.escape(endpoint.name), status=endpoint.status.value.replace("_", " "), where=endpoint.where,
            hourly="per request" if hourly is None else f"{usd(hourly)}/h", lineage=source)))
        if lineage is not None and _may_manage(services, actor, lineage):
            blocks.append(bk.actions([cards.undeploy_button(endpoint.name, "per request" if hourly is None else
                                                            f"{usd(hourly)}/h")],
                                     block_id=f"home.endpoint.{endpoint.name}"))
    note = texts.HOME_MORE_ENDPOINTS_TAB if surface is bk.MESSAGE and shown < ENDPOINTS_SHOWN \
        else texts.HOME_MORE_ENDPOINTS
    more = bk.more(len(live) - shown, note)
    return blocks + ([more] if more else [])


def _lineage_or_none(services: Services, lineage_id: str) -> Lineage | None:
    try:
        return services.store.get_lineage(lineage_id)
    except TrainbotError:
        return None


def _may_manage(services: Services, actor: Actor, lineage: Lineage) -> bool:
    try:
        services.jobs.policy.check_can_manage(actor, lineage, verb="undeploy endpoints of")
    except TrainbotError:
        return False
    return True


def _schedules(services: Services) -> list[bk.Block]:
    blocks: list[bk.Block] = [bk.divider(), bk.section(f"*{texts.HOME_SCHEDULES}*")]
    schedules = services.schedules.list() if services.schedules is not None else []
    if not schedules:
        return [*blocks, bk.context(texts.HOME_SCHEDULES_NONE)]
    lines = [texts.HOME_SCHEDULE_LINE.format(name=bk.escape(s.name), cron=s.cron, tz=s.tz,
                                             next_run=s.next_run_text()) for s in schedules[:SCHEDULES_SHOWN]]
    if len(schedules) > SCHEDULES_SHOWN:
        lines.append(texts.HOME_MORE.format(count=len(schedules) - SCHEDULES_SHOWN))
    return [*blocks, bk.section("\n".join(lines))]


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------- keeping it fresh


@dataclass
class _Viewer:
    actor: Actor
    fingerprint: tuple[tuple[str, ...], ...] = ()
    published_at: float = float("-inf")


@dataclass
class HomeRefresher:
    """Publishes the home tab of whoever opened it, again when their jobs change (debounced)."""

    services: Services
    chat: HomeChat
    min_interval: float = HOME_MIN_INTERVAL
    max_per_tick: int = HOME_MAX_PER_TICK
    monotonic: Callable[[], float] = time.monotonic
    _viewers: dict[str, _Viewer] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def opened(self, actor: Actor) -> bool:
        """The person opened the tab (or pressed one of its buttons): publish now. False when it failed."""
        fingerprint = self._fingerprints().get(actor.user_id, ())
        with self._lock:
            viewer = self._viewers.setdefault(actor.user_id, _Viewer(actor))
            viewer.actor = actor
        return self._publish(viewer, fingerprint)

    def tick(self) -> list[str]:
        """Publish the homes whose jobs changed since they were last published; returns those users."""
        fingerprints = self._fingerprints()
        now = self.monotonic()
        with self._lock:
            due = [v for v in self._viewers.values()
                   if fingerprints.get(v.actor.user_id, ()) != v.fingerprint and now - v.published_at >= self.min_interval]
        published = []
        with prioritised(Priority.CHANGE):  # nobody is waiting on these: a job changed
            for viewer in sorted(due, key=lambda v: v.published_at)[: self.max_per_tick]:
                if self._publish(viewer, fingerprints.get(viewer.actor.user_id, ())):
                    published.append(viewer.actor.user_id)
        return published

    def run(self, stop: threading.Event, every: float = HOME_TICK_SECONDS) -> None:
        while not stop.wait(every):
            try:
                self.tick()
            except Exception:  # a failed tick is logged; the next one tries again
                log.exception("home refresh failed")

    def _publish(self, viewer: _Viewer, fingerprint: tuple[tuple[str, ...], ...]) -> bool:
        try:
            self.chat.publish_home(viewer.actor.user_id, home_view(self.services, viewer.actor))
        except ChatUnavailable as exc:
            log.warning("could not publish the home of %s: %s", viewer.actor.user_id, exc)
            return False
        with self._lock:
            viewer.fingerprint = fingerprint
            viewer.published_at = self.monotonic()
        return True

    def _fingerprints(self) -> dict[str, tuple[tuple[str, ...], ...]]:
        """Per launcher: each recent job's status and its latest attempt's (what a state change changes)."""
        found: dict[str, list[tuple[str, ...]]] = {}
        for lineage in self.services.store.list_lineages(limit=LINEAGES_READ):
            latest = lineage.latest_attempt
            found.setdefault(lineage.launched_by, []).append((
                lineage.id, lineage.status.value, latest.job_name if latest else "",
                latest.status.value if latest else "", latest.secondary_status if latest else ""))
        return {user: tuple(sorted(rows)) for user, rows in found.items()}
