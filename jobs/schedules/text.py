"""The text of `/schedule add`: schedule options (cron, tz, overlap, threshold, deploy_if_better, endpoint)
parsed out of the /train arguments, and the rule for schedule names.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from jobs.comparison import DEFAULT_REGRESSION_POINTS
from jobs.errors import ScheduleError
from jobs.planning.grammar import plain_punctuation
from jobs.schedules.store import Schedule

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
DEFAULT_TZ = "UTC"
OVERLAP_CHOICES = ("skip", "queue")
# Keys of `/schedule add` that belong to the schedule; everything else is a /train argument.
_SCHEDULE_KEYS = {
    "cron": "cron", "tz": "tz", "timezone": "tz", "overlap": "overlap",
    "regression_threshold": "threshold", "threshold": "threshold", "deploy_if_better": "deploy_if_better",
    "endpoint": "endpoint",
}
#: An endpoint's name (SageMaker's EndpointName rule), as `/deploy name=` takes it.
ENDPOINT_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", re.ASCII)


@dataclass(frozen=True)
class AddRequest:
    cron: str
    tz: str
    train_text: str
    overlap: str = "skip"
    regression_points: float = DEFAULT_REGRESSION_POINTS
    deploy_if_better: bool = False
    endpoint: str | None = None  # the endpoint its runs are promoted into (better ones without a click)


def parse_add_text(text: str) -> AddRequest:
    """``cron="0 2 * * *" [tz=ZONE] [overlap=queue] [threshold=0.5] [deploy_if_better=yes endpoint=NAME]
    <train args>``."""
    try:
        tokens = shlex.split(plain_punctuation(text))
    except ValueError:
        raise ScheduleError('The command has an unbalanced quote: write the cron as cron="0 2 * * *".') from None
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(tokens):
        key, has_value, value = tokens[i].partition("=")
        slot = _SCHEDULE_KEYS.get(key.lower())
        i += 1
        if slot is None or not has_value:
            rest.append(tokens[i - 1])
            continue
        if slot == "cron":  # an unquoted cron: take the following bare fields too
            while len(value.split()) < 5 and i < len(tokens) and "=" not in tokens[i]:
                value, i = f"{value} {tokens[i]}", i + 1
        found[slot] = value.strip()
    if "cron" not in found:
        raise ScheduleError('Give the schedule a cron expression, e.g. cron="0 2 * * *" for 02:00 every night.')
    deploy = _yes_no(found.get("deploy_if_better", "no"), "deploy_if_better")
    endpoint = check_endpoint(found["endpoint"]) if found.get("endpoint") else None
    if deploy and endpoint is None:
        raise ScheduleError("deploy_if_better=yes needs the endpoint to promote into: add endpoint=NAME "
                            "(an endpoint /deploy JOB name=NAME made).")
    return AddRequest(
        cron=found["cron"], tz=found.get("tz", DEFAULT_TZ), train_text=shlex.join(rest),
        overlap=check_overlap(found.get("overlap", "skip")),
        regression_points=_threshold(found.get("threshold")),
        deploy_if_better=deploy, endpoint=endpoint,
    )


def check_endpoint(name: str) -> str:
    if not ENDPOINT_PATTERN.fullmatch(name):
        raise ScheduleError(f"endpoint={name!r} cannot be an endpoint's name: use letters, digits and hyphens, "
                            "at most 63 characters.")
    return name


def check_overlap(value: str) -> str:
    if value.lower() not in OVERLAP_CHOICES:
        raise ScheduleError(f"overlap takes skip or queue, not {value!r}.")
    return value.lower()


def _threshold(value: str | None) -> float:
    if value is None:
        return DEFAULT_REGRESSION_POINTS
    try:
        points = float(value)
    except ValueError:
        points = -1.0
    if not 0 <= points <= 100:
        raise ScheduleError(f"threshold takes points between 0 and 100 (e.g. threshold=0.5), not {value!r}.")
    return points


def _yes_no(value: str, key: str) -> bool:
    if value.lower() in ("yes", "true", "on", "1"):
        return True
    if value.lower() in ("no", "false", "off", "0"):
        return False
    raise ScheduleError(f"{key} takes yes or no, not {value!r}.")


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ScheduleError(
            f"{name!r} cannot name a schedule: use up to 63 letters, digits, - and _, starting with a letter or digit."
        )
    return name


def check_endpoint_task(endpoint: str, task: str | None, live: Mapping[str, str]) -> None:
    """A schedule's endpoint=NAME that serves another task is refused: none of its runs could go there. One that
    does not exist yet is taken (with endpoint_missing_words said back): the first run is deployed to make it."""
    serves = live.get(endpoint)
    if serves is not None and task is not None and serves != task:
        raise ScheduleError(f"Endpoint {endpoint} serves {serves}, and this schedule trains {task}: none of its "
                            f"runs could be promoted there. Name an endpoint that serves {task}, or leave endpoint= "
                            "out.")


def endpoint_missing_words(schedule: str, endpoint: str, live: list[str]) -> str:
    """Said when a schedule is added with an endpoint that does not exist (yet)."""
    near = difflib.get_close_matches(endpoint, live, n=1, cutoff=0.6)
    hint = f" Did you mean {near[0]}?" if near else ""
    return (f"Endpoint {endpoint} does not exist yet: {schedule}'s runs are compared, but none is promoted until "
            f"one is deployed there (/deploy JOB name={endpoint} after its first run).{hint}")


def endpoint_words(schedule: Schedule) -> str:
    """`  endpoint=prod (deploy_if_better)` in /schedule list; "" for a schedule without one."""
    if not schedule.endpoint:
        return ""
    return f"  endpoint={schedule.endpoint}" + (" (deploy_if_better)" if schedule.deploy_if_better else "")
