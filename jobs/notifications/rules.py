"""The routable events, /notify's grammar and what a subscription matches: pure functions, no I/O.

Event names are what people type (`gave-up`, `endpoint-idle`); each maps onto outbox kinds in
handlers/routing.py. A subscription has a set of events and at most one filter: the launcher
(`user=`), the schedule (`schedule=`) or the preset (`preset=`) of the job.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from jobs.errors import BadInput
from jobs.planning.grammar import plain_punctuation

LAUNCHED = "launched"  # the first attempt was seen running on the backend
INTERRUPTED = "interrupted"  # spot capacity was reclaimed; SageMaker waits and resumes
RELAUNCHED = "relaunched"  # a new attempt started from the checkpoints
COMPLETED = "completed"
FAILED = "failed"  # the user's code failed (or the launch was refused)
GAVE_UP = "gave-up"  # capacity kept failing past the restart cap or the fallback list
REGRESSION = "regression"  # a scheduled run's quality metric dropped against the previous run
ENDPOINT_IDLE = "endpoint-idle"  # the daily note of endpoints nobody asked for a while

EVENTS = (LAUNCHED, INTERRUPTED, RELAUNCHED, COMPLETED, FAILED, GAVE_UP, REGRESSION, ENDPOINT_IDLE)
DEFAULT_EVENTS = (FAILED, GAVE_UP, REGRESSION)
FILTER_KINDS = ("user", "schedule", "preset")
_ALIASES = {"gave_up": GAVE_UP, "gaveup": GAVE_UP, "endpoint_idle": ENDPOINT_IDLE, "idle": ENDPOINT_IDLE,
            "regressed": REGRESSION, "started": LAUNCHED, "launch": LAUNCHED, "fail": FAILED,
            "done": COMPLETED, "complete": COMPLETED, "interrupt": INTERRUPTED, "relaunch": RELAUNCHED}
# <@U123|alice> (Slack's escaped mention), <@U123>, @U123, U123
_MENTION = re.compile(r"<@([UW][A-Z0-9_]+)(?:\|[^>]*)?>|@?([UW][A-Z0-9_]{2,})")
_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")

USAGE = (
    "Usage: /notify on [EVENTS] [user=@someone | schedule=NAME | preset=NAME] subscribes this channel; "
    "/notify off [the same filter]; /notify list; /notify dm on|off. EVENTS: " + ", ".join(EVENTS)
    + " (default: " + ", ".join(DEFAULT_EVENTS) + "; `all` for every one)."
)


@dataclass(frozen=True)
class Filter:
    """At most one condition on the job; kind "" matches every job."""

    kind: str = ""  # "", "user", "schedule" or "preset"
    value: str = ""

    def describe(self) -> str:
        if not self.kind:
            return "every job"
        if self.kind == "user":
            return f"jobs launched by {self.value}"
        return f"jobs of {self.kind} {self.value}"


@dataclass(frozen=True)
class JobFacts:
    """What a filter looks at: the job's launcher, schedule and preset."""

    launched_by: str
    schedule: str | None
    preset: str | None


@dataclass(frozen=True)
class NotifyCommand:
    verb: str  # on, off, list, dm, help
    events: tuple[str, ...] = ()
    filter: Filter = Filter()
    dm: bool | None = None


def matches(flt: Filter, job: JobFacts) -> bool:
    if flt.kind == "user":
        return job.launched_by == flt.value
    if flt.kind == "schedule":
        return job.schedule == flt.value
    if flt.kind == "preset":
        return job.preset == flt.value
    return True


def parse_notify(text: str, *, me: str) -> NotifyCommand:
    """/notify's text -> what to do; BadInput names the bad word and what is valid. ``me`` is the caller
    (`user=me`)."""
    try:
        words = shlex.split(plain_punctuation(text).replace(",", " "))
    except ValueError:
        raise BadInput(f"The command has an unbalanced quote. {USAGE}") from None
    if not words or words[0].lower() in ("help", "-h", "--help", "?"):
        return NotifyCommand("help")
    verb, rest = words[0].lower(), words[1:]
    if verb == "list" and not rest:
        return NotifyCommand("list")
    if verb == "dm":
        return NotifyCommand("dm", dm=_on_off(rest))
    if verb in ("on", "off"):
        events, flt = _events_and_filter(rest, me=me, allow_events=verb == "on")
        return NotifyCommand(verb, events=events or (DEFAULT_EVENTS if verb == "on" else ()), filter=flt)
    raise BadInput(f"Unknown /notify command {' '.join(words)[:60]!r}. {USAGE}")


def parse_event(word: str) -> str:
    name = word.strip().lower()
    name = _ALIASES.get(name.replace("-", "_"), _ALIASES.get(name, name))
    if name not in EVENTS:
        raise BadInput(f"Unknown event {word[:40]!r}: the events are {', '.join(EVENTS)} (or all).")
    return name


def _on_off(rest: list[str]) -> bool:
    if len(rest) == 1 and rest[0].lower() in ("on", "yes", "true"):
        return True
    if len(rest) == 1 and rest[0].lower() in ("off", "no", "false"):
        return False
    raise BadInput("Usage: /notify dm on (a direct message when each of your jobs ends) or /notify dm off.")


def _events_and_filter(words: list[str], *, me: str, allow_events: bool) -> tuple[tuple[str, ...], Filter]:
    events: list[str] = []
    flt = Filter()
    for word in words:
        key, has_value, value = word.partition("=")
        if has_value:
            if flt.kind:
                raise BadInput(f"One filter at a time: {flt.kind}= and {key}= were both given. {USAGE}")
            flt = _filter(key.strip().lower(), value.strip(), me=me)
        elif not allow_events:
            raise BadInput(f"/notify off takes no events ({word[:40]!r}): it removes the whole subscription. "
                           "Use /notify on EVENTS to change which events it has.")
        elif word.lower() == "all":
            events.extend(EVENTS)
        else:
            events.append(parse_event(word))
    return tuple(dict.fromkeys(events)), flt


def _filter(kind: str, value: str, *, me: str) -> Filter:
    if kind not in FILTER_KINDS:
        raise BadInput(f"Unknown filter {kind[:30]!r}=: use user=@someone, schedule=NAME or preset=NAME.")
    if not value:
        raise BadInput(f"{kind}= needs a value, e.g. {kind}={'@someone' if kind == 'user' else 'NAME'}.")
    if kind == "user":
        return Filter("user", _user_id(value, me=me))
    if not _NAME.fullmatch(value):
        raise BadInput(f"{kind}={value[:40]!r} is not a {kind} name (letters, digits, -, _, . and :).")
    return Filter(kind, value)


def _user_id(value: str, *, me: str) -> str:
    if value.lower() in ("me", "@me"):
        return me
    found = _MENTION.fullmatch(value)
    if found:
        return found.group(1) or found.group(2)
    if ":" in value and _NAME.fullmatch(value):  # console:NAME and cli:NAME launchers
        return value
    raise BadInput(
        f"user={value[:40]!r} names nobody: mention the person (user=@someone, which Slack turns into their "
        "ID), give their member ID (U...) or write user=me."
    )
