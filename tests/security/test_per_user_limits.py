"""Issue 22, item 11: one person's schedules, /notify subscriptions and recipes are bounded (settings with
defaults), and a schedule may not fire more often than TRAINBOT_MIN_SCHEDULE_MINUTES. Signed requests into
the real bot; a schedule stored before the rule existed is not run more often either."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from jobs.settings import Settings
from jobs.store.schema import schedule_runs, schedules_table, write_transaction
from tests.security.bot_rig import RealBot, real_bot

TRAIN = "distilbert-spot"


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, trainbot_max_schedules_per_user=2, trainbot_max_subscriptions_per_user=2,
                  trainbot_max_recipes_per_user=2) as rig:
        yield rig


def test_the_defaults_are_sane() -> None:
    settings = Settings()
    assert settings.trainbot_min_schedule_minutes == 60
    assert 1 < settings.trainbot_max_schedules_per_user <= 50
    assert 1 < settings.trainbot_max_subscriptions_per_user <= 100
    assert 1 < settings.trainbot_max_recipes_per_user <= 100


@pytest.mark.parametrize("cron", ["* * * * *", "*/30 * * * *", "0,1 2 * * *", "0 * * * *,"])
def test_a_cron_more_often_than_the_minimum_is_refused(bot: RealBot, cron: str) -> None:
    said = bot.command("/schedule", f'add busy cron="{cron}" {TRAIN}')["text"]
    assert "TRAINBOT_MIN_SCHEDULE_MINUTES" in said or "not a cron expression" in said, said
    assert "busy" not in bot.command("/schedule", "list")["text"]


def test_an_hourly_cron_is_as_often_as_the_default_allows(bot: RealBot) -> None:
    said = bot.command("/schedule", f'add hourly cron="0 * * * *" {TRAIN}')["text"]
    assert "Schedule hourly added" in said, said


def test_schedules_are_bounded_per_person(bot: RealBot) -> None:
    for name in ("one", "two"):
        assert "added" in bot.command("/schedule", f'add {name} cron="0 2 * * *" {TRAIN}')["text"]
    said = bot.command("/schedule", f'add three cron="0 3 * * *" {TRAIN}')["text"]
    assert "TRAINBOT_MAX_SCHEDULES_PER_USER" in said
    assert "added" in bot.command("/schedule", f'add bobs cron="0 4 * * *" {TRAIN}', user="U_BOB")["text"]


def test_subscriptions_are_bounded_per_person(bot: RealBot) -> None:
    for channel in ("C_ONE", "C_TWO"):
        assert "now gets" in bot.command("/notify", "on failed", channel=channel)["text"]
    said = bot.command("/notify", "on failed", channel="C_THREE")["text"]
    assert "TRAINBOT_MAX_SUBSCRIPTIONS_PER_USER" in said
    assert "now has" in bot.command("/notify", "on completed", channel="C_ONE")["text"]  # changing one is fine
    assert "now gets" in bot.command("/notify", "on failed", channel="C_THREE", user="U_BOB")["text"]


def test_recipes_are_bounded_per_person(bot: RealBot) -> None:
    for name in ("first", "second"):
        assert "saved" in bot.command("/recipe", f"save {name} {TRAIN}")["text"]
    assert "TRAINBOT_MAX_RECIPES_PER_USER" in bot.command("/recipe", f"save third {TRAIN}")["text"]
    assert "changed" in bot.command("/recipe", "save first bert-squad")["text"]  # changing one is fine


def test_a_schedule_stored_before_the_minimum_does_not_run_every_minute(tmp_path: Path) -> None:
    with real_bot(tmp_path, trainbot_max_job_usd=0.01) as bot:  # each run is refused at once: no training
        now = datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc)
        with write_transaction(bot.runtime.store.engine) as conn:
            conn.execute(insert(schedules_table).values(
                name="legacy", cron="* * * * *", tz="UTC", text=TRAIN, channel="C_ML", created_by="U_ALICE",
                via="slack", paused=False, overlap="skip", regression_points=1.0, deploy_if_better=False,
                created_at=now, updated_at=now))
        schedules = bot.runtime.schedules
        first = schedules.fire("legacy", now)
        later = [schedules.fire("legacy", now + timedelta(minutes=m)) for m in range(1, 5)]
        after_an_hour = schedules.fire("legacy", now + timedelta(minutes=61))
        assert first.outcome == "failed" and after_an_hour.outcome == "failed"  # run (and refused by the cap)
        assert [r.outcome for r in later] == ["skipped"] * 4
        with bot.runtime.store.engine.connect() as conn:
            assert len(conn.execute(select(schedule_runs.c.id)).all()) == 2  # the skips add no rows
