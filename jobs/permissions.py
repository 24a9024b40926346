"""Who may use the bot, and who may stop and deploy: the rules only (handlers.router checks every command,
button and modal against check_can_use and audits refusals; the services check again).

- TRAINBOT_ALLOWED_USERS: user IDs (U..., W...) and user-group IDs (S..., matched against Actor.groups).
- TRAINBOT_ALLOWED_CHANNELS: channel IDs (C..., G..., D...).
- TRAINBOT_ADMINS: user or user-group IDs; admins pass every rule.
An empty list means everyone of the bot's own organization. A person from another organization (a Slack
Connect channel shares the bot's cards with them) is let in only where TRAINBOT_ALLOWED_USERS or
TRAINBOT_ADMINS names their own ID. Only the launcher or an admin may manage a lineage: stop it, put its model
into any endpoint (a deploy, or a promotion into an endpoint of their own), and change its model package's
approval. Only an endpoint's owner (who deployed it) or an admin may promote into it or roll it back; an
owner's rollback changes the endpoint, never the approval of another person's package. A job's log and
failure lines are for its launcher, an admin, and whoever asks from the job's own channel (its thread, which
shows its failure and log tail, is there already).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.errors import PermissionDenied
from jobs.records import Actor
from jobs.settings import Settings

if TYPE_CHECKING:
    from jobs.lineage import Lineage

log = logging.getLogger(__name__)

_OPERATOR_SURFACES = frozenset({"cli", "console"})
_MAX_LISTED = 5  # IDs named in a refusal before "and N more"


@dataclass(frozen=True)
class AccessPolicy:
    allowed_users: frozenset[str] = frozenset()  # users and user groups; empty = everyone
    allowed_channels: frozenset[str] = frozenset()  # empty = every channel
    admins: frozenset[str] = frozenset()  # users and user groups

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        return cls(
            allowed_users=frozenset(settings.trainbot_allowed_users),
            allowed_channels=frozenset(settings.trainbot_allowed_channels),
            admins=frozenset(settings.trainbot_admins),
        )

    def is_admin(self, actor: Actor) -> bool:
        # The CLI and the terminal console run on the bot's own machine with its database and cloud
        # credentials in reach: their operator already holds every power the rules could withhold.
        return actor.via in _OPERATOR_SURFACES or _matches(actor, self.admins)

    def check_can_use(self, actor: Actor) -> None:
        """PermissionDenied unless the actor's user (or a group of theirs) and channel are allowed."""
        if actor.external and actor.user_id not in self.allowed_users | self.admins:
            log.info("refused %s: from another organization", actor.user_id)
            raise PermissionDenied(
                f"You ({actor.user_id}) are from another organization: trainbot takes commands and buttons "
                "only from its own organization's members, unless an admin adds your ID to "
                f"TRAINBOT_ALLOWED_USERS ({self._admin_names()})."
            )
        if self.is_admin(actor):
            return
        if self.allowed_users and not _matches(actor, self.allowed_users):
            log.info("refused %s: not in TRAINBOT_ALLOWED_USERS", actor.user_id)
            raise PermissionDenied(
                f"You ({actor.user_id}) are not allowed to use trainbot: only the users and user groups "
                f"in TRAINBOT_ALLOWED_USERS may; ask an admin ({self._admin_names()}) to add your ID there."
            )
        if self.allowed_channels and not self._channel_allowed(actor):
            where = actor.channel_id or "outside a channel"
            log.info("refused %s in %s: channel not in TRAINBOT_ALLOWED_CHANNELS", actor.user_id, where)
            raise PermissionDenied(
                f"trainbot cannot be used from here ({where}): use one of the channels in "
                f"TRAINBOT_ALLOWED_CHANNELS ({_listed(self.allowed_channels)}), or ask an admin "
                f"({self._admin_names()}) to add this one."
            )

    def may_manage(self, actor: Actor, lineage: Lineage) -> bool:
        """Whether the actor launched the lineage or is an admin: who may stop it, serve its model anywhere,
        and approve or reject its model package."""
        return actor.user_id == lineage.launched_by or self.is_admin(actor)

    def check_can_manage(self, actor: Actor, lineage: Lineage, *, verb: str = "stop or deploy") -> None:
        """PermissionDenied unless the actor launched the lineage or is an admin."""
        if self.may_manage(actor, lineage):
            return
        log.info("refused %s managing %s (launched by %s)", actor.user_id, lineage.id, lineage.launched_by)
        raise PermissionDenied(
            f"Only the person who launched {lineage.id} ({lineage.launched_by}) or an admin "
            f"({self._admin_names()}) may {verb} it; ask one of them."
        )

    def may_read_logs(self, actor: Actor, lineage: Lineage) -> bool:
        """Whether the actor may see the lineage's log and failure lines: its launcher, an admin, or a person
        asking from the lineage's own channel."""
        in_its_channel = actor.channel_id is not None and actor.channel_id == lineage.channel
        return in_its_channel or self.may_manage(actor, lineage)

    def check_can_read_logs(self, actor: Actor, lineage: Lineage) -> None:
        """PermissionDenied unless ``may_read_logs``."""
        if self.may_read_logs(actor, lineage):
            return
        log.info("refused %s the logs of %s (launched by %s)", actor.user_id, lineage.id, lineage.launched_by)
        raise PermissionDenied(logs_refused(lineage, self._admin_names()))

    def logs_withheld(self, lineage: Lineage) -> str:
        """The sentence shown where the failure lines of a job the reader may not see are left out."""
        return logs_refused(lineage, self._admin_names())

    def check_owns_endpoint(self, actor: Actor, endpoint: str, owner: str, *, verb: str) -> None:
        """PermissionDenied unless the actor deployed the endpoint (its owner) or is an admin."""
        if actor.user_id == owner or self.is_admin(actor):
            return
        log.info("refused %s: %s endpoint %s (owned by %s)", actor.user_id, verb, endpoint, owner)
        raise PermissionDenied(
            f"Only the owner of endpoint {endpoint} ({owner}, who deployed it) or an admin "
            f"({self._admin_names()}) may {verb}; ask one of them."
        )

    def _channel_allowed(self, actor: Actor) -> bool:
        # A terminal or CLI actor has no channel and the channel rule cannot apply to it; a Slack actor
        # always comes from a channel, so a missing one there is refused rather than waved through.
        if actor.channel_id is None:
            return actor.via != "slack"
        return actor.channel_id in self.allowed_channels

    def _admin_names(self) -> str:
        return (
            f"TRAINBOT_ADMINS: {_listed(self.admins)}" if self.admins else "none are set in TRAINBOT_ADMINS"
        )


def logs_refused(lineage: Lineage, admins: str) -> str:
    where = f", anyone in its channel ({lineage.channel})" if lineage.channel else ""
    return (f"The log and failure lines of {lineage.id} are shown only to the person who launched it "
            f"({lineage.launched_by}){where} or an admin ({admins}); ask one of them.")


def _matches(actor: Actor, ids: frozenset[str]) -> bool:
    return actor.user_id in ids or any(group in ids for group in actor.groups)


def _listed(ids: Iterable[str]) -> str:
    ordered = sorted(ids)
    shown = ", ".join(ordered[:_MAX_LISTED])
    more = len(ordered) - _MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown
