"""The console's Block Kit renderer and chat surface, on the handlers' real cards."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot import console_render as render
from bot.console_cards import NotPressed, Press
from bot.console_chat import ConsoleChat, Screen
from handlers import blocks as bk
from handlers import cards
from handlers.chat import Reply
from jobs.planning.grammar import parse_command
from jobs.planning.pricing import estimate


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("*Status*", "Status"),
        ("_note_ and max_run_seconds stay", "note and max_run_seconds stay"),
        ("~old~", "old"),
        ("<@U123>", "@U123"),
        ("<#C1|general>", "#general"),
        ("<!here>", "@here"),
        ("_as of <!date^1767261840^{date_short_pretty} {time}|2026-01-01 10:04 UTC>_", "as of 2026-01-01 10:04 UTC"),
        ("<https://x.test/a|the logs>", "the logs (https://x.test/a)"),
        ("<https://x.test/a>", "https://x.test/a"),
        ("a &lt;b&gt; &amp; c", "a <b> & c"),
        (":white_check_mark: completed", "✔ completed"),
        (":made_up_emoji: at 12:30:45", ":made_up_emoji: at 12:30:45"),
        ("`/train bert-squad`", "`/train bert-squad`"),
        ("2*3*4 = 24", "2*3*4 = 24"),
    ],
)
def test_mrkdwn_becomes_plain_text(source: str, expected: str) -> None:
    assert render.mrkdwn(source) == expected


def test_code_fences_keep_their_lines_indented() -> None:
    lines = render.text_lines("*Log*\n```line one\n  line *two*```")
    assert lines == ["Log", "  line one", "    line *two*"]


def test_fields_pair_up_when_short_and_stand_alone_when_long() -> None:
    short = render.field_lines(["*Task*\nqa", "*Spot*\nyes"])
    long = render.field_lines(["*Hyperparameters*\n" + "x" * 60, "*Spot*\nyes"])
    assert short == [f"{'Task: qa':<{render.FIELD_COLUMN}}Spot: yes"]
    assert long == ["Hyperparameters: " + "x" * 60, "Spot: yes"]
    assert render.field_lines(["*Task*\nqa", "*Spot*\nyes"], columns=False) == ["Task: qa", "Spot: yes"]


def test_plan_card_renders_every_part_with_its_buttons_last() -> None:
    spec = parse_command("bert-squad instances=1 spot=yes", max_instances=16)
    blocks = cards.plan_card(spec, estimate(spec), command="/train x spot=yes", value='{"r":"1","t":"x"}',
                             scaling_note="local: tiny BERT, 200 examples", max_job_usd=None)
    lines = render.message_lines("fallback", blocks)
    assert lines[0] == f"Plan: {spec.model} on 1 x {spec.instance_type}"
    assert "`/train x spot=yes`" in lines
    assert any(line.startswith("Task: question-answering") for line in lines)
    assert any(f"Model: {spec.model}" in line for line in lines)
    assert any("Managed spot" in line for line in lines)
    assert "ℹ local: tiny BERT, 200 examples" in lines
    assert lines[-1] == "[Launch] [Edit] [Cancel]"


def test_card_boxes_and_thread_replies_indent() -> None:
    assert render.card(["Title", "body", "[Stop]"]) == ["┌ Title", "│ body", "└ [Stop]"]
    assert render.card(["only"]) == ["┌ only"]
    assert render.thread_reply("job-1", ["first", "second"]) == ["    ↳ job-1 › first", "      second"]


def test_other_blocks_and_a_message_without_blocks() -> None:
    blocks = [
        bk.divider(),
        bk.image("https://x.test/p.png", "loss curve"),
        bk.actions([bk.button("Open", "a", url="https://x.test/o"), bk.button("Stop", "b", "v")]),
        {"type": "context", "elements": [bk.mrkdwn("one"), bk.mrkdwn(":x: two")]},
    ]
    assert render.message_lines("", blocks) == [
        "─" * 20, "[image: loss curve] https://x.test/p.png", "[Open → https://x.test/o] [Stop]", "one · ✖ two",
    ]
    assert render.message_lines("just *text*", []) == ["just text"]


def test_progress_line_and_changed_lines_and_table() -> None:
    assert render.progress_line({"step": 20, "max_steps": 60, "loss": 0.70812, "eta_s": 13.0}) == (
        "step 20/60 · loss 0.7081 · ETA 13 s"
    )
    assert render.progress_line({"step": 5, "eta_s": 185}) == "step 5 · ETA 3 min 5 s"
    assert render.changed_lines(["a", "b", "c"], ["a", "B", "c", "d"]) == ["B", "d"]
    assert render.table(["job", "cost"], [["qa", "$1.00"], ["spot-long", "$0.30"]]) == [
        "job        cost", "---------  -----", "qa         $1.00", "spot-long  $0.30",
    ]


# ---------------------------------------------------------------- the chat surface


def _chat(tmp_path: Path) -> tuple[ConsoleChat, io.StringIO]:
    out = io.StringIO()
    return ConsoleChat(Screen(out, redraw_prompt=False), tmp_path / "home" / "uploads", user="console:me"), out


def test_posted_card_updates_print_only_what_changed(tmp_path: Path) -> None:
    chat, out = _chat(tmp_path)
    first = [bk.header("job-1"), *bk.fields([("Status", "running"), ("Cost", "$0.00"), ("Estimate", "$1"),
                                              ("By", "me")])]
    ts = chat.post("C", "job-1", blocks=first)
    second = [bk.header("job-1"), *bk.fields([("Status", "completed"), ("Cost", "$0.00"), ("Estimate", "$1"),
                                               ("By", "me")])]
    chat.update("C", ts, "job-1", blocks=second)
    chat.update("C", ts, "job-1", blocks=second)  # nothing changed: nothing printed
    chat.post("C", "done", blocks=[bk.section("all good")], thread_ts=ts)
    printed = out.getvalue().splitlines()
    assert printed[0] == "┌ job-1"
    assert printed[-2:] == ["↻ job-1: Status: completed", "    ↳ job-1 › all good"]


def test_a_bare_label_presses_only_the_newest_card_and_an_older_one_by_its_name(tmp_path: Path) -> None:
    chat, out = _chat(tmp_path)
    chat.post("C", "a", blocks=[bk.header("job-a"), bk.actions([cards.stop_button("job-a")])])
    chat.post("C", "b", blocks=[bk.header("job-b"), bk.actions([cards.stop_button("job-b")])])
    newest = chat.find("STOP")
    assert isinstance(newest, Press) and newest.button.value == "job-b"
    assert "Stop job-b?" in (newest.button.confirm or "")  # the question names the job it stops
    chat.show(Reply(text="plan", blocks=[bk.header("Plan"), bk.actions([bk.button("Launch", "train.launch", "v")])]))
    assert "└ [Launch]  · card c3" in out.getvalue()  # the handle an older card is named by
    # The plan card is the newest now: a bare `stop` presses nothing, and says which card has one.
    refused = chat.find("stop")
    assert isinstance(refused, NotPressed)
    assert refused.sentence.startswith("The newest card (Plan, c3) has no Stop button now: nothing was pressed.")
    assert "`stop c2` (job-b)" in refused.sentence
    for name in ("job-a", "c1"):
        named = chat.find("stop", name)
        assert isinstance(named, Press) and named.button.value == "job-a"
    assert chat.labels() == ["launch"]
    plan = chat.find("launch")
    assert isinstance(plan, Press) and plan.card.ephemeral
    chat.retire(plan.card.key, answered_by="Cancel")
    gone = chat.find("launch")
    assert isinstance(gone, NotPressed) and "was answered with Cancel" in gone.sentence
    assert chat.find("nothing") is None
    assert isinstance(chat.find("stop", "job-z"), NotPressed)


def test_uploads_are_saved_under_home_with_their_path_printed(tmp_path: Path) -> None:
    chat, out = _chat(tmp_path)
    png = tmp_path / "elsewhere" / "curve.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG fake")
    chat.upload_file("C", png, title="Loss curve")
    saved = tmp_path / "home" / "uploads" / "curve.png"
    assert saved.read_bytes() == b"\x89PNG fake"
    assert out.getvalue().strip() == f"Loss curve: saved {saved}"
    inside = tmp_path / "home" / "plots" / "p.png"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(b"x")
    chat.upload_file("C", inside, title="Plot")
    assert out.getvalue().strip().endswith(f"Plot: saved {inside.resolve()}")


def test_dm_and_ephemeral_text(tmp_path: Path) -> None:
    chat, out = _chat(tmp_path)
    chat.dm("console:me", "Your job *x* failed")
    chat.post_ephemeral("C", "console:me", "Stopping <@U1>")
    assert out.getvalue().splitlines() == ["✉ direct message to console:me: Your job x failed", "Stopping @U1"]


def test_every_emoji_the_bot_writes_is_a_character_in_the_console() -> None:
    """Issue 35, item 10: `:rewind:` showed raw beside real emoji. Every shortcode in the bot's texts (a
    `:name:` followed by a space, as the texts write them) becomes one character."""
    import re

    root = Path(__file__).resolve().parents[2]
    found: set[str] = set()
    for package in ("handlers", "jobs", "bot"):
        for source in (root / package).rglob("*.py"):
            found |= set(re.findall(r"(?<=[\"'\s]):([a-z][a-z0-9_+-]*):(?= )", source.read_text()))
    assert {"rewind", "warning", "rocket"} <= found
    raw = sorted(name for name in found if render.mrkdwn(f":{name}: x") == f":{name}: x")
    assert raw == []


def test_code_blocks_show_slacks_entities_as_the_characters_they_are() -> None:
    assert render.text_lines("Logs:\n```x &lt;tag&gt; &amp; co```") == ["Logs:", "  x <tag> & co"]
