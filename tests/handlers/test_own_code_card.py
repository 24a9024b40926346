"""/train with own code through the router on the runtime `trainbot` builds: the plan card names the
repository at its pinned commit and, for a spot job, says in one line what the script must do to resume."""

from __future__ import annotations

import json
from pathlib import Path

from bot.wiring import build_runtime
from handlers import router
from handlers.context import CommandContext
from jobs.planning.own_code import SPOT_RESUME_NOTE
from jobs.records import Actor
from jobs.settings import Settings
from tests.handlers.fakes import RecordingChat
from tests.support.clock import FakeClock
from tests.support.git_repos import make_repo

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def test_the_plan_card_shows_the_pinned_commit_and_the_spot_resume_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"train/run.py": "print('hi')\n"})
    settings = Settings(trainbot_home=tmp_path / "home", trainbot_backend="local", trainbot_code_sources=(repo.url,))
    runtime = build_runtime(settings, clock=FakeClock())
    try:
        ctx = CommandContext(actor=ALICE, channel_id="C_ML", services=runtime.services(), chat=RecordingChat())
        reply = router.run_command(ctx, "train", f"distilbert-spot code=git+{repo.url}@main entry=train/run.py")
        card = json.dumps(reply.blocks)
        assert f"@{commit[:7]} (main), entry train/run.py" in card
        assert json.dumps(SPOT_RESUME_NOTE)[1:-1] in card
        on_demand = router.run_command(ctx, "train", f"distilbert-spot spot=no code=git+{repo.url}@main entry=train/run.py")
        assert "Spot resume" not in json.dumps(on_demand.blocks)
        refused = router.run_command(ctx, "train", "distilbert-spot code=git+https://github.com/x/y.git entry=run.py")
        assert "not among the sources" in refused.text and not refused.blocks
    finally:
        runtime.shutdown()


def test_the_report_card_says_which_attempt_resumed_from_which_checkpoint() -> None:
    from handlers.cards import report_blocks

    report = {"attempts": [{"number": 1}, {"number": 2, "resumed_from_step": 40, "steps_redone": 3}],
              "cost_usd": 0.1, "metrics": {"eval_loss": 0.2}}
    text = json.dumps(report_blocks("own-1", report, "own-1 completed"))
    assert "attempt 2 from the checkpoint at step 40 (3 steps redone)" in text
