"""Issue 22, item 10: a recipe cannot take over a /train key, because recipe names are read as keys are
(``-`` and ``_`` alike, any case). Signed `/recipe save` requests into the real bot, and the installed CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.bot_rig import RealBot, real_bot
from tests.security.cli import clean_env, one_sentence, trainbot

#: Today's names for keys, as people type them (the grammar reads `max-run` as max_run).
KEY_NAMES = ["on-demand-fallback", "max-run", "instance-count", "use-spot", "max_run", "batch-size", "data"]


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path) as rig:
        yield rig


@pytest.mark.parametrize("name", KEY_NAMES)
def test_a_recipe_named_like_a_key_is_refused(bot: RealBot, name: str) -> None:
    said = bot.command("/recipe", f"save {name} distilbert-spot epochs=1")["text"]
    assert "key or command word" in said and "pick another name" in said, said
    assert name not in bot.command("/recipe", "list")["text"]


def test_the_key_still_means_the_key_after_the_refusal(bot: RealBot) -> None:
    bot.command("/recipe", "save use-spot bert-squad instances=4")
    card = bot.command("/train", "use-spot model=distilbert-base-uncased dataset=imdb")
    assert "bert-large" not in card["text"] and "distilbert" in card["text"], card["text"]


def test_a_preset_spelt_with_underscores_is_refused(bot: RealBot) -> None:
    said = bot.command("/recipe", "save bert_squad distilbert-spot")["text"]
    assert "built-in preset" in said


def test_two_spellings_of_one_name_are_one_recipe(bot: RealBot) -> None:
    """Bob cannot plant ``squad_nightly`` beside Alice's ``squad-nightly``; /train squad_nightly is hers."""
    assert "saved" in bot.command("/recipe", "save squad-nightly bert-squad epochs=1")["text"]
    said = bot.command("/recipe", "save squad_nightly distilbert-spot", user="U_BOB")["text"]
    assert "squad-nightly exists" in said
    card = bot.command("/train", "squad_nightly")
    assert "bert-large" in card["text"], card["text"]


def test_the_cli_refuses_with_exit_2(tmp_path: Path) -> None:
    done = trainbot(clean_env(tmp_path / "home"), "recipe", "save", "on-demand-fallback", "distilbert-spot")
    assert done.returncode == 2 and "key or command word" in one_sentence(done)
