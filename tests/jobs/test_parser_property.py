"""Property: whatever text arrives, the parser returns a JobSpec or raises SpecError, nothing else.

A JobSpec it returns must also survive a JSON round trip and be plannable and priced.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.errors import SpecError
from jobs.planning.grammar import help_for, keys, parse_command
from jobs.planning.instances import instance_names
from jobs.planning.plan import build_plan
from jobs.planning.presets import PRESETS
from jobs.planning.spec import JobSpec

KEY_WORDS = sorted(keys()) + ["hp.seed", "hp.optim", "hp.2x", "hp.", "mp.", "MAX_RUN", "--spot", "\u2014instances", "x"]
VALUES = [
    "", "0", "1", "2", "-1", "16", "17", "3.5", "1e-5", "nan", "inf", "-inf", "1e999", "99999999999999999999",
    "yes", "no", "TRUE", "off", "maybe", "90m", "2h", "1h30m", "0h", "30d", "\u0663", "1_0",
    "data", "model", "ddp", "none", "qa", "classification", "squad", "mnli", "imdb", "owner/data:cfg",
    "s3://b/p", "/tmp/x", "4.28.1", "4.36", "2.8", "py310", "3.12", "spread", "interleaved",
    '"quoted value"', "'single'", "\u201ccurly\u201d", '"unbalanced', "a b", "\x00", "\u00a0", "<@U1>", "&amp;",
    *instance_names()[:6], "ml.trn1.2xlarge", "ml.nope",
]


def token() -> st.SearchStrategy[str]:
    pair = st.tuples(st.sampled_from(KEY_WORDS), st.sampled_from(VALUES)).map(lambda kv: f"{kv[0]}={kv[1]}")
    bare = st.sampled_from([*PRESETS, *KEY_WORDS, "help", "/train", "\u201c", '"', "'", "="])
    return st.one_of(pair, bare, st.text(max_size=12))


def check(text: str) -> None:
    try:
        spec = parse_command(text)
    except SpecError as exc:
        assert exc.message and "\n" not in exc.message
        return
    assert isinstance(spec, JobSpec)
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec
    plan = build_plan(spec, bucket="", lineage_id="<lineage>")
    assert plan.cost.worst_case_usd >= 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_arbitrary_text(text: str) -> None:
    check(text)
    help_for(text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(token(), max_size=10), st.sampled_from(["", "/train ", "\u00a0", "bert-squad ", "distilbert-spot "]))
def test_token_soups(tokens: list[str], prefix: str) -> None:
    check(prefix + " ".join(tokens))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(VALUES), max_size=6), st.sampled_from(list(PRESETS)))
def test_presets_with_overrides(values: list[str], preset: str) -> None:
    words = sorted(keys())
    check(preset + " " + " ".join(f"{words[i * 7 % len(words)]}={v}" for i, v in enumerate(values)))
