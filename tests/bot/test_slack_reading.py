"""Issue 35, items 4, 6, 8 and 10 as Slack sends them: signed slash commands into the real Bolt app over HTTP,
the whole runtime as `trainbot serve --http` builds it on (moto's) SageMaker, answering the loopback Slack.

- `/train help` fits Slack's limits and shows every part of the help (item 6);
- em-dashes and curly quotes, as Slack turns a typed `--` and quotes into them, read the same in /train,
  /notify, /schedule, /deploy and /recipe (item 8);
- what a person typed comes back escaped once (Slack sends typed brackets as &lt; &gt;) (item 10);
- a schedule's endpoint: one that serves another task is refused, one that does not exist yet is taken with a
  warning, and `/schedule list` shows it (item 4).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.records import Actor
from tests.bot.promotion_rig import Bot, promotion_bot
from tests.support.block_kit import message_problems
from tests.support.moto_server import MotoAws, moto_aws, moto_server  # noqa: F401  (fixtures)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


@pytest.fixture
def bot(tmp_path: Path, moto_aws: MotoAws) -> Iterator[Bot]:  # noqa: F811
    with promotion_bot(tmp_path, moto_aws) as running:
        yield running


def shown(answer: dict[str, Any]) -> str:
    """Everything an answer shows: its text and its blocks' texts."""
    return answer.get("text", "") + "\n" + json.dumps(answer.get("blocks") or [], ensure_ascii=False)


def deployed(bot: Bot, preset: str, name: str) -> str:
    lineage = bot.runtime.jobs.launch(preset, actor=ALICE)
    bot.finish_job(lineage.id, {"eval_f1": 80.0} if preset == "bert-squad" else {"eval_accuracy": 0.9})
    bot.cycle()
    bot.command("/deploy", f"{lineage.id} name={name}")
    bot.cycle()
    return lineage.id


def test_train_help_fits_slacks_limits_and_shows_every_part(bot: Bot) -> None:
    answer = bot.command("/train", "help")
    assert message_problems(answer.get("blocks"), answer.get("text")) == []
    sections = [b["text"]["text"] for b in answer["blocks"] if b["type"] == "section"]
    assert all(len(text) <= 3000 for text in sections)
    body = "\n".join(sections)
    for part in ("*Presets*", "*Keys*", "*Training arguments*", "*Channels*", "*Model parallel*", "Durations: 3600"):
        assert part in body, part
    assert "registry: the model line" in body  # the last key: nothing was cut
    assert "/train help KEY explains one key" in shown(answer)


def test_dashes_and_curly_quotes_read_the_same_in_every_command(bot: Bot) -> None:
    """Slack turns a typed `--` into an em-dash and straight quotes into curly ones."""
    card = bot.command("/train", "distilbert-spot \u2014spot=no \u2014hp.run_name=\u201cmy run\u201d")
    assert "*Spot*\\nno" in shown(card) and "run_name=my run" in shown(card)
    notify = bot.command("/notify", "on failed \u2014preset=bert-squad")
    assert notify["text"].startswith("This channel now gets failed for"), notify
    recipe = bot.command("/recipe", "save fast distilbert-spot \u2014max_run=2h")
    assert "fast" in recipe["text"] and "max_run=2h" in recipe["text"], recipe
    schedule = bot.command("/schedule", "add nightly \u2014cron=\u201c0 2 * * *\u201d distilbert-spot")
    assert schedule["text"].startswith("Schedule nightly added"), schedule
    job = bot.runtime.jobs.launch("distilbert-spot", actor=ALICE)
    bot.finish_job(job.id, {"eval_accuracy": 0.9})
    bot.cycle()
    deploy = bot.command("/deploy", f"{job.id} \u2014name=sentiment \u2014instance_type=ml.m5.xlarge")
    assert deploy["text"].startswith(f"Deploying {job.id} as endpoint sentiment on 1 x ml.m5.xlarge"), deploy


def test_what_was_typed_comes_back_escaped_once(bot: Bot) -> None:
    """Slack sends `/job <tag> & co` as `&lt;tag&gt; &amp; co`: the answer shows it escaped once, not twice."""
    for command in ("/job", "/stop", "/logs", "/undeploy", "/endpoint"):
        answer = shown(bot.command(command, "&lt;tag&gt;&amp;co"))
        assert "&lt;tag&gt;&amp;co" in answer, (command, answer)
        assert "&amp;lt;" not in answer and "&amp;amp;" not in answer, (command, answer)


def test_a_schedules_endpoint_is_checked_and_listed(bot: Bot) -> None:
    deployed(bot, "bert-squad", "qa-prod")
    other_task = bot.command("/schedule", 'add imdb cron="0 2 * * *" endpoint=qa-prod distilbert-spot')
    assert other_task["text"] == (
        "Endpoint qa-prod serves question-answering, and this schedule trains text-classification: none of its runs "
        "could be promoted there. Name an endpoint that serves text-classification, or leave endpoint= out.")
    assert bot.runtime.schedules.list() == []

    missing = bot.command("/schedule", 'add nightly cron="0 2 * * *" deploy_if_better=yes endpoint=qa-prd bert-squad')
    assert missing["text"].startswith("Schedule nightly added"), missing
    assert "A run better than the one before is promoted into qa-prd without a click." in missing["text"]
    assert (":warning: Endpoint qa-prd does not exist yet: nightly's runs are compared, but none is promoted until one "
            "is deployed there (/deploy JOB name=qa-prd after its first run). Did you mean qa-prod?") in missing["text"]

    listed = bot.command("/schedule", "list")
    assert "nightly  cron='0 2 * * *' tz=UTC  endpoint=qa-prd (deploy_if_better)  next:" in shown(listed)


def test_predict_with_another_tasks_inputs_is_one_sentence(bot: Bot) -> None:
    """Issue 35, item 9: a text-classification endpoint asked with question= and context= was sent them, and
    its tokenizer's error came back; now the ack says what it reads, and nothing is sent."""
    deployed(bot, "distilbert-spot", "sentiment")
    answer = bot.command("/predict", 'sentiment question="who won?" context="we did"')
    assert answer["text"] == 'This endpoint serves text-classification: ask it with text="...", not context= and question=.'
    qa = deployed(bot, "bert-squad", "qa")
    assert bot.command("/predict", 'qa text="fine"')["text"] == (
        'This endpoint serves question-answering: ask it with question="..." context="...", not text=.'), qa
