"""Access rules: allowed users and user groups, channels, admins; who may manage a lineage."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jobs.errors import PermissionDenied
from jobs.permissions import AccessPolicy
from jobs.records import Actor
from jobs.settings import Settings


def actor(
    user: str = "U_ALICE", channel: str | None = "C_ML", groups: tuple[str, ...] = (), via: str = "slack"
) -> Actor:
    return Actor(user, channel_id=channel, groups=groups, via=via)


def lineage(launched_by: str) -> Any:
    # check_can_manage reads only .id and .launched_by of a Lineage.
    return SimpleNamespace(id="bert-squad-1a2b3c4d", launched_by=launched_by)


def test_empty_lists_let_everyone_in() -> None:
    policy = AccessPolicy.from_settings(Settings())
    policy.check_can_use(actor("U_ANYONE", "C_ANY"))
    policy.check_can_use(actor("cli:bob", None, via="cli"))


def test_from_settings_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINBOT_ALLOWED_USERS", "U_ALICE, S_MLTEAM")
    monkeypatch.setenv("TRAINBOT_ALLOWED_CHANNELS", "C_ML;G_PRIVATE")
    monkeypatch.setenv("TRAINBOT_ADMINS", "U_ADMIN")
    policy = AccessPolicy.from_settings(Settings())
    assert policy == AccessPolicy(
        frozenset({"U_ALICE", "S_MLTEAM"}), frozenset({"C_ML", "G_PRIVATE"}), frozenset({"U_ADMIN"})
    )


def test_allowed_users_and_user_groups() -> None:
    policy = AccessPolicy(allowed_users=frozenset({"U_ALICE", "S_MLTEAM"}), admins=frozenset({"U_ADMIN"}))
    policy.check_can_use(actor("U_ALICE"))
    policy.check_can_use(actor("U_CAROL", groups=("S_OTHER", "S_MLTEAM")))
    with pytest.raises(PermissionDenied) as refused:
        policy.check_can_use(actor("U_BOB", groups=("S_OTHER",)))
    text = refused.value.message
    assert "U_BOB" in text and "TRAINBOT_ALLOWED_USERS" in text and "U_ADMIN" in text
    assert text.count(".") == 1 and "\n" not in text  # one sentence


def test_allowed_channels_including_private_channels_and_dms() -> None:
    policy = AccessPolicy(allowed_channels=frozenset({"C_ML", "G_PRIVATE", "D_ALICE"}))
    for channel in ("C_ML", "G_PRIVATE", "D_ALICE"):
        policy.check_can_use(actor(channel=channel))
    with pytest.raises(PermissionDenied, match="TRAINBOT_ALLOWED_CHANNELS") as refused:
        policy.check_can_use(actor(channel="C_RANDOM"))
    assert "C_RANDOM" in refused.value.message and "C_ML" in refused.value.message
    assert "none are set in TRAINBOT_ADMINS" in refused.value.message


def test_a_slack_actor_without_a_channel_is_refused_but_a_terminal_is_not() -> None:
    policy = AccessPolicy(allowed_channels=frozenset({"C_ML"}))
    with pytest.raises(PermissionDenied):
        policy.check_can_use(actor(channel=None, via="slack"))
    policy.check_can_use(actor("cli:bob", channel=None, via="cli"))


def test_users_and_channels_must_both_pass() -> None:
    policy = AccessPolicy(allowed_users=frozenset({"U_ALICE"}), allowed_channels=frozenset({"C_ML"}))
    policy.check_can_use(actor("U_ALICE", "C_ML"))
    with pytest.raises(PermissionDenied):
        policy.check_can_use(actor("U_ALICE", "C_RANDOM"))
    with pytest.raises(PermissionDenied):
        policy.check_can_use(actor("U_BOB", "C_ML"))


def test_admins_pass_every_rule_also_by_group() -> None:
    policy = AccessPolicy(
        allowed_users=frozenset({"U_ALICE"}),
        allowed_channels=frozenset({"C_ML"}),
        admins=frozenset({"U_ADMIN", "S_OPS"}),
    )
    policy.check_can_use(actor("U_ADMIN", "C_ELSEWHERE"))
    policy.check_can_use(actor("U_OPS1", "C_ELSEWHERE", groups=("S_OPS",)))
    assert policy.is_admin(actor("U_OPS1", groups=("S_OPS",)))
    assert not policy.is_admin(actor("U_ALICE"))


def test_only_the_launcher_or_an_admin_may_manage() -> None:
    policy = AccessPolicy(admins=frozenset({"U_ADMIN"}))
    policy.check_can_manage(actor("U_ALICE"), lineage("U_ALICE"))
    policy.check_can_manage(actor("U_ADMIN"), lineage("U_ALICE"))
    with pytest.raises(PermissionDenied) as refused:
        policy.check_can_manage(actor("U_BOB"), lineage("U_ALICE"), verb="deploy")
    text = refused.value.message
    assert "bert-squad-1a2b3c4d" in text and "U_ALICE" in text and "U_ADMIN" in text and "deploy" in text


def test_long_id_lists_are_shortened_in_messages() -> None:
    policy = AccessPolicy(allowed_channels=frozenset(f"C_{i:02d}" for i in range(12)))
    with pytest.raises(PermissionDenied, match="and 7 more"):
        policy.check_can_use(actor(channel="C_NOPE"))


@pytest.mark.parametrize("via", ["cli", "console"])
def test_the_operator_at_the_bots_own_terminal_passes_every_rule(via: str) -> None:
    policy = AccessPolicy(frozenset({"U_ALICE"}), frozenset({"C_ML"}), frozenset({"U_ADMIN"}))
    operator = actor("cli:root", None, via=via)
    policy.check_can_use(operator)
    policy.check_can_manage(operator, lineage("U_ALICE"))


def test_a_slack_user_named_like_the_operator_gets_no_operator_powers() -> None:
    policy = AccessPolicy(frozenset({"U_ALICE"}), frozenset(), frozenset({"U_ADMIN"}))
    with pytest.raises(PermissionDenied):
        policy.check_can_use(actor("cli:root", "C_ML", via="slack"))


def test_someone_of_another_organization_gets_in_only_by_their_own_id() -> None:
    """A Slack Connect channel lets another company press the bot's buttons: "everyone" means everyone of
    the bot's own organization; a group of theirs (resolved in our workspace) never lets them in."""
    partner = Actor("U0PARTNER", channel_id="C0SHARED", groups=("S_ML",), via="slack", external=True)
    with pytest.raises(PermissionDenied, match="from another organization"):
        AccessPolicy().check_can_use(partner)
    with pytest.raises(PermissionDenied, match="from another organization"):
        AccessPolicy(allowed_users=frozenset({"S_ML"}), admins=frozenset({"S_ML"})).check_can_use(partner)
    AccessPolicy(allowed_users=frozenset({"U0PARTNER"})).check_can_use(partner)
    AccessPolicy(admins=frozenset({"U0PARTNER"})).check_can_use(partner)
    AccessPolicy().check_can_use(Actor("U_ALICE", channel_id="C0SHARED", via="slack"))
