"""What every `trainbot` command shares: the TEXT it was given as Slack would read it, the operator as an
actor, the runtime, and the log file."""

from __future__ import annotations

import argparse
import getpass
import logging
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobs.errors import BadInput
from jobs.home import secure_home
from jobs.planning.grammar import plain_punctuation
from jobs.records import Actor
from jobs.settings import Settings

if TYPE_CHECKING:
    from bot.wiring import Runtime


def runtime_for(
    settings: Settings, *, with_backend: bool = True, force_local: bool = False, trusted_terminal: bool = False
) -> Runtime:
    from bot.wiring import build_runtime

    configure_logging(settings)
    return build_runtime(settings, with_backend=with_backend, force_local=force_local,
                         trusted_terminal=trusted_terminal)


def command_text(words: Sequence[str]) -> str:
    # The shell already split the words; join them back as a shell would quote them so the
    # Slack grammar sees exactly what the person meant (`hp.note="two words"` stays one token).
    if len(words) == 1 and _is_whole_command(words[0]):
        return words[0]
    return shlex.join(plain_punctuation(word) for word in words)


def _is_whole_command(word: str) -> bool:
    """`trainbot plan "bert-squad spot=yes"` or `"model=m dataset=squad"`: the whole command as one argument,
    as typed in Slack. A single key=value whose value has spaces (`"hp.note=two words"`) is not: its second
    word is no key=value."""
    parts = word.split()
    return len(parts) > 1 and ("=" not in parts[0] or "=" in parts[1])


def pop_flag(words: Sequence[str], flag: str) -> tuple[list[str], bool]:
    kept = [word for word in words if word != flag]
    return kept, len(kept) != len(words)


def key_values(pairs: Sequence[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = plain_punctuation(pair).partition("=")
        if not sep or not key:
            raise BadInput(f"`{pair}` is not key=value; write it like instance_type=ml.g5.xlarge.")
        values[key.strip()] = value
    return values


def cli_actor() -> Actor:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "operator"
    return Actor(user_id=f"cli:{user}", via="cli", display=user)


def usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def configure_logging(settings: Settings) -> None:
    if logging.getLogger().handlers:
        return
    secure_home(settings.trainbot_home)  # 0700: its log is the bot's alone too
    handler = logging.FileHandler(settings.trainbot_home / "trainbot.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
