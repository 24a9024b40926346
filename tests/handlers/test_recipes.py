"""Team recipes through the router both surfaces call, on the runtime `trainbot` builds (real store, local
backend that launches nothing here): save, use with overrides, permissions, the YAML file, and names that
would shadow a preset or a key. The CLI's `trainbot recipe ...` is at the end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.wiring import Runtime, build_runtime
from handlers import router
from handlers.context import CommandContext
from jobs.errors import BadInput, PermissionDenied
from jobs.records import Actor
from jobs.settings import Settings
from tests.handlers.fakes import RecordingChat
from tests.support.clock import FakeClock
from tests.support.environment import outside_env

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
ADMIN = Actor("U_ADMIN", channel_id="C_ML", via="slack")
TRAINBOT = Path(sys.executable).with_name("trainbot")


@pytest.fixture
def recipes_file(tmp_path: Path) -> Path:
    path = tmp_path / "recipes.yaml"
    path.write_text(
        "recipes:\n"
        "  squad-small: bert-squad instances=1 instance_type=ml.p3.8xlarge distribution=ddp epochs=1\n"
        "  bert-squad: roberta-mnli\n"  # shadows a preset: left out
        "  broken: bert-squad instances=lots\n"  # does not validate: left out
    )
    return path


@pytest.fixture
def runtime(tmp_path: Path, recipes_file: Path) -> Runtime:
    settings = Settings(trainbot_home=tmp_path / "home", trainbot_backend="local", trainbot_admins=("U_ADMIN",),
                        trainbot_recipes_file=recipes_file)
    runtime = build_runtime(settings, clock=FakeClock())
    yield runtime
    runtime.shutdown()


def say(runtime: Runtime, actor: Actor, command: str, text: str) -> str:
    ctx = CommandContext(actor=actor, channel_id="C_ML", services=runtime.services(), chat=RecordingChat())
    return router.run_command(ctx, command, text).text


def test_save_then_train_by_name_with_later_keys_overriding(runtime: Runtime) -> None:
    saved = say(runtime, ALICE, "recipe", "save nightly-spot distilbert-spot epochs=2 lr=3e-5 max_run=30m")
    assert saved.startswith("Recipe nightly-spot saved")
    spec = runtime.jobs.plan("nightly-spot epochs=3 spot=no").spec
    assert spec.preset == "distilbert-spot" and spec.hyperparameters["num_train_epochs"] == 3
    assert spec.hyperparameters["learning_rate"] == 3e-5 and spec.max_run == 1800
    assert not spec.spot and spec.max_wait is None  # spot=no over the recipe drops the recipe's max_wait
    card = say(runtime, ALICE, "train", "nightly-spot instances=1")
    assert "distilbert-base-uncased" in card
    listed = say(runtime, BOB, "recipe", "list")
    assert "nightly-spot: /train distilbert-spot epochs=2 lr=3e-5 max_run=30m" in listed


def test_a_recipe_is_validated_like_train(runtime: Runtime) -> None:
    assert "instance_count takes a whole number" in say(runtime, ALICE, "recipe", "save bad bert-squad instances=lots")
    assert "No recipe is named 'bad'" in say(runtime, ALICE, "recipe", "show bad")
    assert "needs /train arguments" in say(runtime, ALICE, "recipe", "save empty")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bert-squad", "built-in preset"),
        ("distilbert-spot", "built-in preset"),
        ("spot", "key or command word"),
        ("epochs", "key or command word"),
        ("help", "key or command word"),
        ("Bad Name", "not valid"),
    ],
)
def test_names_that_would_shadow_a_preset_or_a_key_are_refused(runtime: Runtime, name: str, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        runtime.recipes.save(name, "bert-squad spot=yes", actor=ALICE)


def test_only_the_author_or_an_admin_changes_or_removes_a_recipe(runtime: Runtime) -> None:
    runtime.recipes.save("alices", "bert-squad spot=yes", actor=ALICE)
    with pytest.raises(PermissionDenied, match="Only the author of recipe alices"):
        runtime.recipes.save("alices", "bert-squad", actor=BOB)
    refused = say(runtime, BOB, "recipe", "remove alices")
    assert "Only the author" in refused
    assert "recipe.refused" in [e.action for e in runtime.store.audit_log(target="remove alices")]
    assert say(runtime, ALICE, "recipe", "save alices bert-squad spot=yes epochs=1").startswith("Recipe alices changed")
    assert say(runtime, ADMIN, "recipe", "remove alices") == "Recipe alices removed."
    assert runtime.recipes.lookup("alices") is None


def test_the_recipes_file_is_read_only_and_names_what_it_left_out(runtime: Runtime, recipes_file: Path) -> None:
    spec = runtime.jobs.plan("squad-small max_steps=10").spec
    assert (spec.instance_type, spec.instance_count, spec.distribution) == ("ml.p3.8xlarge", 1, "ddp")
    assert spec.hyperparameters["max_steps"] == 10
    assert runtime.jobs.plan("bert-squad").spec.model == "bert-large-uncased-whole-word-masking"  # the preset wins
    listed = say(runtime, ALICE, "recipe", "list")
    assert "squad-small: /train bert-squad" in listed and f"kept in {recipes_file}" in listed
    assert "left out of the recipes file: bert-squad: bert-squad is a built-in preset" in listed
    assert "left out of the recipes file: broken:" in listed
    assert "change it there" in say(runtime, ADMIN, "recipe", "save squad-small bert-squad")
    assert "change it there" in say(runtime, ADMIN, "recipe", "remove squad-small")

    recipes_file.write_text("squad-tiny: bert-squad instances=1 instance_type=ml.p3.8xlarge distribution=ddp\n")
    assert runtime.jobs.plan("squad-tiny").spec.instance_count == 1  # the file is read again when it changes
    assert runtime.recipes.lookup("squad-small") is None


def test_a_recipe_cannot_start_from_another_recipe(runtime: Runtime) -> None:
    runtime.recipes.save("base", "bert-squad spot=yes", actor=ALICE)
    with pytest.raises(BadInput, match="Unknown preset 'base'"):
        runtime.recipes.save("derived", "base epochs=1", actor=ALICE)


def test_own_code_in_a_recipe_must_come_from_an_allowed_source(runtime: Runtime) -> None:
    reply = say(runtime, ALICE, "recipe", "save mine bert-squad code=git+https://github.com/x/y.git entry=run.py")
    assert "TRAINBOT_CODE_SOURCES" in reply


def test_recipe_help_and_unknown_verbs(runtime: Runtime) -> None:
    assert "/recipe save NAME" in say(runtime, ALICE, "recipe", "")
    assert "Unknown /recipe command 'rename'" in say(runtime, ALICE, "recipe", "rename a b")
    assert "/recipe" in router.SLASH_COMMANDS


def test_the_cli_saves_lists_shows_uses_and_removes(tmp_path: Path) -> None:
    env: dict[str, Any] = outside_env()
    env.update(TRAINBOT_HOME=str(tmp_path / "home"), TRAINBOT_BACKEND="local")

    def trainbot(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TRAINBOT), *args], env=env, capture_output=True, text=True, timeout=120, check=False)

    saved = trainbot("recipe", "save", "quick", "distilbert-spot", "epochs=1", "hp.run_name=two words")
    assert saved.returncode == 0, saved.stderr
    assert "quick" in trainbot("recipe", "list").stdout
    assert "'hp.run_name=two words'" in trainbot("recipe", "show", "quick").stdout
    parsed = trainbot("parse", "quick", "epochs=4")
    assert parsed.returncode == 0, parsed.stderr
    assert '"num_train_epochs": 4' in parsed.stdout and '"run_name": "two words"' in parsed.stdout
    planned = trainbot("plan", "quick", "spot=no")
    assert planned.returncode == 0 and "Spot: no" in planned.stdout, planned.stderr
    clash = trainbot("recipe", "save", "roberta-mnli", "bert-squad")
    assert clash.returncode == 2 and "built-in preset" in clash.stderr and len(clash.stderr.splitlines()) == 1
    assert trainbot("recipe", "remove", "quick").returncode == 0
    gone = trainbot("recipe", "show", "quick")
    assert gone.returncode == 2 and "No recipe is named 'quick'" in gone.stderr


def test_a_train_ack_reads_nothing_from_the_store_once_its_recipe_and_history_are_known(runtime: Runtime) -> None:
    """Issue 26, item 4: the forecasts' history and the recipe are remembered, so a /train's plan card is
    drawn from memory (the store is read again after a completion, a recipe change, or the memory's time)."""
    from sqlalchemy import event

    say(runtime, ALICE, "recipe", "save nightly-spot distilbert-spot epochs=2 max_run=30m")
    assert "distilbert-base-uncased" in say(runtime, ALICE, "train", "nightly-spot instances=1")
    statements: list[str] = []

    def executed(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        statements.append(sql)

    event.listen(runtime.store.engine, "before_cursor_execute", executed)
    try:
        card = say(runtime, BOB, "train", "nightly-spot instances=1 epochs=5")
        assert "distilbert-base-uncased" in card
        assert statements == [], statements
        say(runtime, ALICE, "recipe", "save nightly-spot distilbert-spot epochs=3 max_run=20m")
        statements.clear()
        runtime.jobs.plan("nightly-spot")  # the saved change is read at once, in this process
        assert any("recipes" in sql for sql in statements)
        assert runtime.jobs.plan("nightly-spot").spec.max_run == 1200
    finally:
        event.remove(runtime.store.engine, "before_cursor_execute", executed)
