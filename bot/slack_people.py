"""Who is asking, as Slack's payloads say: the user groups a person is in, the workspace a request came from,
and whether the person belongs to the bot's own organization.

- Enterprise Grid: user IDs start with W, an interaction's ``user.team_id`` is the org's E... ID, and a
  command carries ``enterprise_id`` beside the workspace's ``team_id``.
- Org-wide installs (``is_enterprise_install``): one token serves every workspace of the org, so Web API
  methods that list a workspace's things (usergroups.list) need that workspace's ``team_id``.
- Slack Connect (shared channels): people of other organizations see the bot's cards and press their
  buttons; their ``user.team_id`` is their own team, neither the bot's workspace nor its org.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from jobs.settings import Settings

log = logging.getLogger(__name__)

GROUPS_TTL_SECONDS = 600.0


class GroupDirectory:
    """Which Slack user groups a user is in (TRAINBOT_ALLOWED_USERS and TRAINBOT_ADMINS may name S... IDs).

    Asked only when the settings name a group; per workspace (an org-wide install's usergroups.list needs
    the team_id); cached for ten minutes; an error means no groups."""

    def __init__(self, client: WebClient, settings: Settings, *, ttl: float = GROUPS_TTL_SECONDS) -> None:
        configured = (*settings.trainbot_allowed_users, *settings.trainbot_admins)
        self._enabled = any(item.startswith("S") for item in configured)
        self._client = client
        self._ttl = ttl
        self._lock = threading.Lock()
        self._members: dict[str | None, dict[str, tuple[str, ...]]] = {}
        self._fetched: dict[str | None, float] = {}
        self._last_team: dict[str, str] = {}  # user -> the workspace they last asked from

    def groups_of(self, user: str, team: str | None = None) -> tuple[str, ...]:
        """The groups of ``user`` in workspace ``team`` (the request's; None when the payload does not say,
        as an org-wide install's interactions may not: the workspace they last asked from, else the token's)."""
        if not self._enabled:
            return ()
        with self._lock:
            if team is None:
                team = self._last_team.get(user)
            else:
                self._last_team[user] = team
            if time.monotonic() - self._fetched.get(team, float("-inf")) > self._ttl:
                self._refresh(team)
            return self._members.get(team, {}).get(user, ())

    def _refresh(self, team: str | None) -> None:
        try:
            response = self._client.usergroups_list(include_users=True, team_id=team)
        except (SlackApiError, SlackClientError, OSError) as exc:
            error = exc.response.get("error", "") if isinstance(exc, SlackApiError) and exc.response else ""
            log.warning("could not list the user groups of %s: %s %s", team or "the workspace",
                        type(exc).__name__, error)
            return
        members: dict[str, list[str]] = {}
        for group in response.get("usergroups") or []:
            for user in group.get("users") or []:
                members.setdefault(user, []).append(group["id"])
        self._members[team] = {user: tuple(ids) for user, ids in members.items()}
        self._fetched[team] = time.monotonic()


def request_team(body: Mapping[str, Any]) -> str | None:
    """The workspace a request came from: a command's or event's ``team_id``, an interaction's ``team.id``
    (null from some surfaces of an org-wide install: then its view's ``team_id``)."""
    team = body.get("team")
    if isinstance(team, dict) and isinstance(team.get("id"), str):
        return str(team["id"])
    if isinstance(body.get("team_id"), str) and body["team_id"]:
        return str(body["team_id"])
    view = body.get("view")
    if isinstance(view, dict) and isinstance(view.get("team_id"), str):
        return str(view["team_id"])
    return None


def is_external(body: Mapping[str, Any], home: set[str]) -> bool:
    """Whether the person of this request belongs to another organization than ``home`` (the bot's
    workspace and org IDs, from auth.test). Unknown either side: not external."""
    user = body.get("user")
    if isinstance(user, dict) and isinstance(user.get("team_id"), str) and user["team_id"]:
        theirs = {str(user["team_id"])}
    else:  # a slash command: where it was typed
        theirs = {str(v) for v in (body.get("team_id"), body.get("enterprise_id")) if isinstance(v, str) and v}
    return bool(home and theirs) and not theirs & home


def home_teams(authorize_result: Any) -> set[str]:
    """The bot's own workspace and org IDs, from Bolt's authorize result (auth.test)."""
    if authorize_result is None:
        return set()
    return {str(v) for v in (authorize_result.team_id, authorize_result.enterprise_id) if v}
