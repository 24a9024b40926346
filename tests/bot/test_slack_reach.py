"""Where the bot can post (bot/slack_reach.py), as conversations.info answers, on a fake clock."""

from __future__ import annotations

from typing import Any

from bot.slack_reach import NO_TTL, YES_TTL, ChannelReach, takes_posts
from tests.support.clock import FakeClock


def test_what_takes_the_bots_posts() -> None:
    assert takes_posts({"is_im": True})
    assert takes_posts({"is_channel": True, "is_member": True, "is_private": True})
    assert takes_posts({"is_channel": True, "is_member": False, "is_private": False})  # chat:write.public
    assert not takes_posts({"is_channel": True, "is_member": False, "is_private": False, "is_ext_shared": True})
    assert not takes_posts({"is_group": True, "is_private": True, "is_member": False})
    assert not takes_posts({"is_mpim": True, "is_member": False})
    assert not takes_posts({"is_channel": True, "is_member": True, "is_archived": True})


class Answers:
    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, channel: str) -> Any:
        self.asked.append(channel)
        return self.answers[channel]


def test_yes_is_remembered_longer_than_no_and_posts_correct_both() -> None:
    clock = FakeClock()
    info = Answers(C1={"is_channel": True, "is_member": True}, G1="channel_not_found", C2="missing_scope")
    reach = ChannelReach(info, monotonic=lambda: clock.now().timestamp())
    assert reach.known("C1") is None and reach.can_post("C1") and reach.known("C1") is True
    assert not reach.can_post("G1") and reach.known("G1") is False
    assert reach.can_post("C2") and reach.known("C2") is None  # cannot tell: yes, unremembered
    clock.advance(NO_TTL + 1)
    assert reach.known("G1") is None and reach.known("C1") is True  # /invite @trainbot is seen within a minute
    reach.posted("G1")  # or at once, by a post that works
    assert reach.known("G1") is True
    reach.refused("C1")
    assert reach.known("C1") is False
    clock.advance(YES_TTL + 1)
    assert reach.known("G1") is None
    assert info.asked == ["C1", "G1", "C2"]
