"""Issue 22, item 7: text that came from outside is escaped (``&``, ``<``, ``>``) wherever it is posted, once.

The real bot (serve --http) on the local backend, against the loopback Slack API. A launched job's script
prints Slack control sequences (``<!channel>``, a user mention, a disguised link) into its log and fails
with them in its error line; the failure goes to the job's thread (fallback text, section, code block), the
card, the launcher's DM and a subscribed channel; ``/logs`` shows the log; the App Home lists the job. Then
every command is typed with the same sequences as arguments. The sweep walks every string the bot sent to
Slack (Web API calls, response_url posts and the acknowledgements themselves): no control sequence from
outside survives, and nothing is escaped twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers import cards
from handlers.blocks import buttons_in
from jobs.lineage import LineageStatus
from tests.security.bot_rig import RealBot, real_bot
from tests.support.slack_bot import block_action, home_opened, slash_command

#: What an attacker's text holds: mentions of everyone, of a user, and a link whose label lies.
HOSTILE = ("<!channel>", "<!here>", "<@UEVIL>", "<https://evil.example/phish|the model card>")
ESCAPED_ONCE = "&lt;!channel&gt;"
TWICE = ("&amp;lt;", "&amp;gt;", "&amp;amp;")
#: Fields Slack never shows as text: button values and ids travel back to the bot, not to people.
NOT_SHOWN = frozenset({"value", "action_id", "block_id", "callback_id", "private_metadata", "trigger_id", "token",
                       "channel", "user", "ts", "thread_ts"})

SCRIPT = """
import sys
print("[trainbot-test] step 1 <!channel> look <@UEVIL> <https://evil.example/phish|the model card> a & b")
print("Traceback (most recent call last):")
print("RuntimeError: CUDA gone <!here> ping <@UEVIL> <https://evil.example/phish|the model card>")
sys.exit(1)
"""

#: Commands typed with the sequences in their arguments (Slack sends mentions as <!channel> and <@U...>).
COMMANDS = [
    ("/notify", "bogus <!channel>"),
    ("/notify", "on bogus-event <!here>"),
    ("/notify", "on failed user=<@U_BOB|bob>"),  # a person named on purpose: the reply mentions them
    ("/notify", "off schedule=<!channel>"),
    ("/recipe", "show <!channel>"),
    ("/recipe", "remove <!channel>"),
    ("/recipe", "save <!channel> distilbert-spot"),
    ("/recipe", "save fine distilbert-spot hp.run_name=<!channel>"),
    ("/recipe", "<!channel>"),
    ("/schedule", "<!channel>"),
    ("/schedule", "pause <!channel>"),
    ("/schedule", "add <!channel> cron=\"0 2 * * *\" distilbert-spot"),
    ("/schedule", "add nightly cron=\"<!channel>\" distilbert-spot"),
    ("/stop", "<!channel>"),
    ("/job", "<!channel>"),
    ("/logs", "<!channel> 5"),
    ("/logs", "x <!here>"),
    ("/deploy", "<!channel>"),
    ("/undeploy", "<!channel>"),
    ("/predict", "<!channel> text=<!here>"),
    ("/train", "<!channel>"),
    ("/train", "distilbert-spot <!channel>=1"),
    ("/train", "distilbert-spot model=<!channel>"),
    ("/train", "distilbert-spot metrics=x:<!channel>([0-9]+)"),
    ("/train", "help <!channel>"),
    ("/train", "distilbert-spot hp.run_name=<!here>"),
    ("/schedule", "add tz1 cron=\"0 2 * * *\" tz=<!channel> distilbert-spot"),
    ("/schedule", "add data1 cron=\"0 2 * * *\" distilbert-spot train_data=<!channel>"),
    ("/schedule", "add named1 cron=\"0 2 * * *\" distilbert-spot hp.run_name=<!channel>"),
    ("/schedule", "list"),
    ("/recipe", "list"),
    ("/notify", "list"),
    ("/deploy", "x instance_type=<!channel>"),
    ("/jobs", ""),
    ("/home", ""),
]


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a request's parameters (blocks and views travel as JSON strings: their strings)."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value) if value[:1] in "[{" else None
        except ValueError:
            decoded = None
        if decoded is None:
            yield value
        else:
            yield from strings_in(decoded)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in NOT_SHOWN:
                yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


def unsafe(sent: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(where, text) of every string that holds a control sequence from outside, or an escape made twice."""
    return [(where, t) for where, t in sent if any(h in t for h in HOSTILE) or any(t2 in t for t2 in TWICE)]


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, job_script=SCRIPT, trainbot_local_data_dirs=(tmp_path,)) as rig:
        yield rig


def test_nothing_from_outside_reaches_slack_unescaped(bot: RealBot) -> None:
    acks: list[str] = []

    def post(fields: dict[str, Any]) -> None:
        status, body = bot.bot.post(fields)
        assert status == 200, body
        acks.append(body)

    # A subscription elsewhere and a DM, so the failure goes everywhere it can.
    post(slash_command("/notify", "on failed", channel="C_ALERTS"))
    post(slash_command("/notify", "dm on"))
    # The card's command shows what was typed (Slack escapes typed brackets), escaped once.
    post(slash_command("/train", 'distilbert-spot hp.run_name="&lt;tag&gt; a &amp; b"',
                       response_url=bot.slack.response_url()))
    card = json.loads(acks[-1])
    assert "&lt;tag&gt; a &amp; b" in json.dumps(card["blocks"]), card["blocks"]
    launch = next(b["value"] for b in buttons_in(card["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    post(block_action(cards.ACTION_LAUNCH, launch, response_url=bot.slack.response_url()))
    bot.settle()
    lineage = bot.runtime.jobs.list()[0]
    ended = bot.watch_until(lineage.id, lambda lin: lin.status is LineageStatus.FAILED)
    assert "CUDA gone" in (ended.latest_attempt.failure_reason if ended.latest_attempt else "")
    for _ in range(3):  # the routed line for C_ALERTS goes out through the outbox on the next pass
        bot.deliver()
    post(slash_command("/logs", f"{lineage.id} 20"))
    post(block_action(cards.ACTION_LOGS, lineage.id, ephemeral=False))
    bot.settle()
    status, body = bot.bot.post_event(home_opened())
    assert status == 200
    acks.append(body)
    for command, text in COMMANDS:
        post(slash_command(command, text, response_url=bot.slack.response_url()))
    bot.settle()

    sent = [(call.method, text) for call in bot.slack.calls for text in strings_in(call.params)]
    sent += [("ack", text) for text in strings_in(acks)]
    failure_posts = [t for _, t in sent if "CUDA gone" in t]
    assert failure_posts, "the failure was never posted"
    assert any("&lt;!here&gt;" in t for t in failure_posts)  # escaped, not dropped
    assert any(ESCAPED_ONCE in t for _, t in sent)
    found = unsafe(sent)
    assert not found, "\n".join(f"{where}: {text[:300]!r}" for where, text in dict.fromkeys(found))


def test_a_thread_reply_fallback_and_code_block_are_escaped(bot: RealBot) -> None:
    """The same job's failure reply, looked at closely: its top-level text and its code block."""
    lineage = bot.runtime.jobs.launch("distilbert-spot", actor=_alice())
    bot.runtime.jobs.attach_message(lineage.id, "C_ML", "1700000000.000001")
    bot.watch_until(lineage.id, lambda lin: lin.status is LineageStatus.FAILED)
    reply = next(c for c in bot.slack.calls_to("chat.postMessage") if "CUDA gone" in c.params.get("text", ""))
    assert "<@UEVIL>" not in reply.params["text"] and "&lt;@UEVIL&gt;" in reply.params["text"]
    blocks = json.loads(reply.params["blocks"]) if isinstance(reply.params["blocks"], str) else reply.params["blocks"]
    code = next(b["text"]["text"] for b in blocks if b["type"] == "section" and "```" in b["text"]["text"])
    assert "&lt;!channel&gt;" in code and "a &amp; b" in code and "<!channel>" not in code


def _alice() -> Any:
    from jobs.records import Actor

    return Actor("U_ALICE", channel_id="C_ML", via="slack")
