"""What an HTTP request must be before Bolt sees it: signed by Slack, then shaped like what the app listens to.

The order is the point. A request is verified (slack_sdk's SignatureVerifier over the raw body) before
anything parses its body, so a forged or stale request is 401 whatever it carries. Only a verified request
is parsed, and one that does not parse, or lacks the fields its kind needs (with their types), is 400 with
one log line: Bolt and the listeners read those fields without checking them, and a surprise there would
be a 500 and a traceback. Socket Mode needs none of this: its envelopes come over a socket opened with the
app token.

One unsigned request is answered: Slack's certificate probe (``ssl_check=1`` and a token, form-encoded, sent
without a signature when the Request URL is saved and now and then after). It gets an empty 200 and nothing
else happens; a body with any other field in it is refused like every unsigned request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

from slack_sdk.signature import Clock, SignatureVerifier

MAX_CLOCK_SKEW_SECONDS = 300  # SignatureVerifier's own rule: older requests may be replays
MAX_BODY_BYTES = 1 << 20  # Slack's payloads are far smaller; a bigger body is read no further
MAX_UNSIGNED_BYTES = 1024  # what is read of an unsigned request: an ssl_check is a few dozen bytes
SSL_CHECK_FIELDS = frozenset({"ssl_check", "token"})
FORM = "application/x-www-form-urlencoded"
JSON = "application/json"

Headers = Mapping[str, Sequence[str]]
Body = dict[str, Any]


class Malformed(Exception):
    """A verified request that is not what Slack sends: the sentence says what is wrong with it."""


class _Now(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


def make_verifier(signing_secret: str, now: Callable[[], float]) -> SignatureVerifier:
    return SignatureVerifier(signing_secret, clock=_Now(now))


def header(headers: Headers, name: str) -> str:
    return (headers.get(name) or [""])[0].strip()


def unsigned_reason(headers: Headers) -> str | None:
    """Why the headers alone show the request cannot be verified (checked before the body is read)."""
    timestamp = header(headers, "x-slack-request-timestamp")
    if not timestamp or not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return "missing or malformed timestamp"
    if not header(headers, "x-slack-signature").startswith("v0="):
        return "missing or malformed signature"
    return None


def unverified_reason(verifier: SignatureVerifier, headers: Headers, body: bytes) -> str | None:
    """None when Slack signed exactly this body at a fresh timestamp; else why not."""
    reason = unsigned_reason(headers)
    if reason is not None:
        return reason
    timestamp = header(headers, "x-slack-request-timestamp")
    if abs(verifier.clock.now() - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return "stale timestamp"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "a body that is not UTF-8 (Slack signs UTF-8 text)"
    if not verifier.is_valid(text, timestamp, header(headers, "x-slack-signature")):
        return "signature does not match"
    return None


def is_ssl_check(headers: Headers, body: bytes | None) -> bool:
    """Slack's unsigned certificate probe: a form body of exactly ``ssl_check=1`` and its token."""
    kind = header(headers, "content-type").split(";", 1)[0].strip().lower()
    if body is None or kind != FORM or len(body) > MAX_UNSIGNED_BYTES:
        return False
    try:
        fields = parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return False
    names = [name for name, _ in fields]
    return (len(names) == len(set(names)) and set(names) <= SSL_CHECK_FIELDS
            and dict(fields).get("ssl_check") == "1")


def parse(body: bytes, content_type: str) -> Body:
    """The body of a verified request as Bolt reads it; Malformed when it is not one Slack would send."""
    text = body.decode("utf-8")  # verified, so UTF-8
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == JSON:
        parsed = _json(text, "the JSON body")
    elif kind == FORM:
        parsed = _form(text)
    else:
        raise Malformed(f"content type {kind or 'none'!r}: Slack sends {FORM} or {JSON}")
    shape_problem = problem(parsed)
    if shape_problem is not None:
        raise Malformed(shape_problem)
    return parsed


def _json(text: str, what: str) -> Body:
    try:
        parsed = json.loads(text)
    except ValueError:
        raise Malformed(f"{what} is not JSON") from None
    if not isinstance(parsed, dict):
        raise Malformed(f"{what} is not a JSON object")
    return parsed


def _form(text: str) -> Body:
    try:
        fields = dict(parse_qsl(text, keep_blank_values=True, strict_parsing=True))
    except ValueError:
        raise Malformed("the form body does not parse") from None
    if "payload" in fields:
        return _json(fields["payload"], "the form's payload")
    return fields


# ---------------------------------------------------------------- shapes


def problem(body: Body) -> str | None:
    """What is missing or mistyped in a parsed body, for the kinds of request this app answers."""
    if body.get("ssl_check") is not None:
        return None
    common = _common_problem(body)
    if common is not None:
        return common
    if "command" in body:
        return _command_problem(body)
    kind = body.get("type")
    check = _CHECKS.get(kind) if isinstance(kind, str) else None
    if check is None:
        return "neither a slash command nor an interaction or event this app takes"
    return check(body)


def _common_problem(body: Body) -> str | None:
    """Fields Bolt reads from every request while it builds its context."""
    for name in ("team", "enterprise", "user", "channel"):
        if not isinstance(body.get(name), (str, dict, type(None))):
            return f"{name} is neither an ID nor an object"
    authorizations = body.get("authorizations")
    if authorizations is not None and not _list_of_dicts(authorizations):
        return "authorizations is not a list of objects"
    for name in ("view", "event", "message", "container", "actions"):
        value = body.get(name)
        if value is not None and not isinstance(value, (dict, list)):
            return f"{name} is not an object"
    return None


def _command_problem(body: Body) -> str | None:
    if not _strings(body, "command", "user_id"):
        return "a slash command without its command or user_id"
    if not _optional_strings(body, "text", "channel_id", "response_url", "trigger_id"):
        return "a slash command with a field that is not text"
    return None


def _user_problem(body: Body) -> str | None:
    user = body.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str):
        return f"a {body.get('type')} without user.id"
    return None


def _block_actions_problem(body: Body) -> str | None:
    actions = body.get("actions")
    if not actions or not _list_of_dicts(actions):
        return "block_actions without a list of actions"
    for action in actions:
        if not isinstance(action.get("action_id"), str) or not _optional_strings(action, "value", "block_id"):
            return "an action without a text action_id and value"
    for name in ("channel", "container"):
        if not isinstance(body.get(name), (dict, type(None))):
            return f"block_actions whose {name} is not an object"
    if not _optional_strings(body, "trigger_id", "response_url"):
        return "block_actions with a trigger_id or response_url that is not text"
    if not isinstance((body.get("container") or {}).get("channel_id"), (str, type(None))):
        return "block_actions whose container.channel_id is not text"
    return _user_problem(body)


def _view_submission_problem(body: Body) -> str | None:
    view = body.get("view")
    if not isinstance(view, dict) or not _strings(view, "callback_id", "type"):
        return "view_submission without a view, its type and its callback_id"
    if not _optional_strings(view, "private_metadata", "id", "hash"):
        return "view_submission whose view has a field that is not text"
    state = view.get("state", {})
    values = state.get("values", {}) if isinstance(state, dict) else None
    if not isinstance(values, dict) or not all(_inputs_are_text(inputs) for inputs in values.values()):
        return "view_submission whose view.state.values are not inputs with text values"
    return _user_problem(body)


def _inputs_are_text(inputs: object) -> bool:
    return isinstance(inputs, dict) and all(
        isinstance(field, dict) and isinstance(field.get("value"), (str, type(None))) for field in inputs.values()
    )


def _url_verification_problem(body: Body) -> str | None:
    return None if isinstance(body.get("challenge"), str) else "url_verification without a challenge"


def _event_problem(body: Body) -> str | None:
    event = body.get("event")
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return "event_callback without an event and its type"
    return None


_CHECKS: dict[str, Callable[[Body], str | None]] = {
    "block_actions": _block_actions_problem,
    "view_submission": _view_submission_problem,
    "url_verification": _url_verification_problem,
    "event_callback": _event_problem,
}


def _strings(fields: Mapping[str, Any], *names: str) -> bool:
    return all(isinstance(fields.get(name), str) for name in names)


def _optional_strings(fields: Mapping[str, Any], *names: str) -> bool:
    return all(isinstance(fields.get(name), (str, type(None))) for name in names)


def _list_of_dicts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)
