"""Block Kit limits hold by construction, whatever goes in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handlers import blocks as bk
from handlers import cards
from jobs.planning.grammar import parse_command
from jobs.planning.pricing import estimate
from jobs.records import Actor
from tests.handlers.fakes import free_text_arguments, make_world, walk_limits


def test_builders_cut_every_text_to_its_limit() -> None:
    huge = "é" * 10_000
    assert len(bk.section(huge)["text"]["text"]) == 3000
    assert bk.section(huge)["text"]["text"].endswith("…")
    assert len(bk.header(huge)["text"]["text"]) == 150
    assert len(bk.button(huge, "a" * 400, "v")["text"]["text"]) == 75
    assert len(bk.button("b", "a" * 400)["action_id"]) == 255
    sections = bk.fields((f"label {i}", huge) for i in range(25))
    assert [len(s["fields"]) for s in sections] == [10, 10, 5]
    walk_limits(sections)
    assert len(bk.context(*([huge] * 30))["elements"]) == 10
    assert bk.section("")["text"]["text"]  # never empty: Slack refuses empty texts


def test_a_value_that_cannot_round_trip_is_refused_not_cut() -> None:
    with pytest.raises(ValueError):
        bk.button("Launch", "a", "x" * 2001)


def test_too_many_blocks_keep_the_buttons() -> None:
    body = [bk.section(f"row {i}") for i in range(120)] + [bk.actions([bk.button("Stop", "job.stop", "x")])]
    cut = bk.message(body, cut_note="… {count} more cut.")
    walk_limits(cut)
    assert len(cut) == 50 and cut[-1]["type"] == "actions"
    assert "72 more cut" in json.dumps(cut[-2])


def test_long_logs_keep_their_tail_and_link_to_the_rest() -> None:
    lines = [f"{i:05d} " + "z" * 300 for i in range(2000)] + ["```injected```"]
    block = bk.code(lines, link="https://logs.example/x", cut_note="… {count} earlier lines cut.")
    walk_limits([block])
    text = block["text"]["text"]
    assert "'''injected'''" in text and "01999" in text and "00000" not in text
    assert "earlier lines cut" in text and "<https://logs.example/x|full log>" in text
    assert text.rstrip().endswith("```")


def test_mrkdwn_escapes_user_text() -> None:
    assert bk.escape("<!channel> & <@U1>") == "&lt;!channel&gt; &amp; &lt;@U1&gt;"


def test_plan_card_with_a_hundred_huge_hyperparameters(tmp_path: Path) -> None:
    text = "bert-squad " + " ".join(f"hp.{name}={'v' * 2400}" for name in free_text_arguments()[:90])
    spec = parse_command(text)
    card = cards.plan_card(spec, estimate(spec), command="/train " + text, value='{"r":"x"}',
                           scaling_note="n" * 9000, max_job_usd=10.0)
    walk_limits(card)


def test_lists_and_reports_of_any_size(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    lineages = [world.jobs.launch("distilbert-spot", actor=Actor("U" + "x" * 300, channel_id="C1", via="slack"))
                for _ in range(70)]
    _, listing = cards.jobs_list(world.jobs.list(limit=100))
    walk_limits(listing)
    _, detail = cards.job_detail(lineages[0])
    walk_limits(detail)
    report = {"metrics": {f"metric_{i}" * 20: 1.0 / (i + 1) for i in range(500)}, "cost_usd": 1e9,
              "links": {f"l{i}": "https://x.example/" + "p" * 3000 for i in range(20)}, "spot_savings": "9" * 5000}
    walk_limits(cards.report_blocks("x" * 500, report, "s" * 10_000))
