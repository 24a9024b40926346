"""One exception hierarchy. Every error carries a sentence a person can act on.

Only ``handlers/`` and the CLI turn these into replies; everything below raises them.
"""

from __future__ import annotations


class TrainbotError(Exception):
    """Base of every error the bot reports to a person."""

    #: CLI exit status: 2 means the request was refused (bad input, a permission, a cap, the wrong state),
    #: 1 that something failed (the backend, the network, the bot's configuration).
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def user_message(self) -> str:
        return self.message


class BadInput(TrainbotError):
    """The person asked for something that cannot be valid as written."""

    exit_code = 2


class SpecError(BadInput):
    """A /train command or job spec that does not validate; ``field`` names the JobSpec field the sentence is
    about, where one is (a form shows the sentence under that field)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ScheduleError(BadInput):
    """A bad cron expression, time zone or schedule name."""


class NotFound(BadInput):
    """An unknown job, lineage, endpoint or schedule."""


class Refused(TrainbotError):
    """The bot will not do this as asked (a permission, a cap, a per-user limit, the thing's state): nothing
    failed, so it is exit 2 like bad input, on every CLI command."""

    exit_code = 2


class PermissionDenied(Refused):
    """The person may not do this here (user, channel or ownership rules)."""


class BudgetExceeded(Refused):
    """The job, the endpoint or the day would cost more than the configured cap."""


class LimitReached(Refused):
    """A per-user limit (schedules, subscriptions, recipes) is reached."""


class InvalidState(Refused):
    """The thing exists but is in the wrong state (deploying an unfinished job, stopping an ended one)."""


class BackendError(TrainbotError):
    """The training backend (SageMaker or the local runner) refused or failed."""


class BackendUnavailable(BackendError):
    """The backend could not be reached at all (network, credentials, endpoint)."""


class CapacityError(BackendError):
    """The backend has no capacity or quota for the requested instances."""


class ConfigError(TrainbotError):
    """The bot is misconfigured (missing role, bucket, token)."""
