"""The environment a test gives the bot's own processes: this one's, less what could reach real services or
carry another test's settings, plus the few settings the whole suite runs with."""
from __future__ import annotations

import os

#: The suite's local jobs write a few MB each. The product keeps 1 GB of its home's disk free by default, which
#: refused them on a build machine whose disk was nearly full (a CI run had 760 MB free): the machine's state,
#: not the bot's behaviour. The reserve's own tests set it themselves.
SUITE_SETTINGS = {"TRAINBOT_LOCAL_DISK_FREE_MB": "64"}

#: What a test's bot process never inherits: credentials, real endpoints, and other tests' trainbot settings.
OUTSIDE_PREFIXES = ("AWS_", "SLACK_", "TRAINBOT_")


def outside_env(*more_prefixes: str, **extra: str) -> dict[str, str]:
    """This process's environment less ``OUTSIDE_PREFIXES`` (and ``more_prefixes``), then the suite's settings,
    then ``extra``."""
    dropped = OUTSIDE_PREFIXES + more_prefixes
    env = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    return {**env, **SUITE_SETTINGS, **extra}
