"""One exception hierarchy. Every error carries a sentence a person can act on.

Only ``handlers/`` and the CLI turn these into replies; everything below raises them.
"""

from __future__ import annotations


class TrainbotError(Exception):
    """Base of every error the bot reports to a person."""

    #: CLI exit status: 2 means the input was wrong, 1 anything else.
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
    """A /train command or job spec that does not validate."""


class ScheduleError(BadInput):
    """A bad cron expression, time zone or schedule name."""


class NotFound(BadInput):
    """An unknown job, lineage, endpoint or schedule."""


class PermissionDenied(TrainbotError):
    """The person may not do this here (user, channel or ownership rules)."""


class BudgetExceeded(TrainbotError):
    """The job or the day would cost more than the configured cap."""


class InvalidState(TrainbotError):
    """The thing exists but is in the wrong state (deploying an unfinished job, stopping an ended one)."""


class BackendError(TrainbotError):
    """The training backend (SageMaker or the local runner) refused or failed."""


class BackendUnavailable(BackendError):
    """The backend could not be reached at all (network, credentials, endpoint)."""


class CapacityError(BackendError):
    """The backend has no capacity or quota for the requested instances."""


class ConfigError(TrainbotError):
    """The bot is misconfigured (missing role, bucket, token)."""
