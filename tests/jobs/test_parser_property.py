"""Property: whatever text arrives, the parser returns a JobSpec or raises SpecError, nothing else.

A JobSpec it returns must also survive a JSON round trip and be plannable and priced, and its
hyperparameters, and those its plan hands the estimator, keep the rules of what may reach a script
(stated here again, independently of jobs.planning.hyperparameters): only names the task's script takes,
never sagemaker_*, the job's folders or hub pushes, report_to none or tensorboard, plain text only.
"""

from __future__ import annotations

import json
import string
import unicodedata
from collections.abc import Mapping
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.errors import SpecError
from jobs.planning.grammar import help_for, keys, parse_command
from jobs.planning.hyperparameters import SCRIPT_ARGUMENTS_FILE
from jobs.planning.instances import instance_names
from jobs.planning.plan import ENTRY_POINTS, build_plan
from jobs.planning.presets import PRESETS
from jobs.planning.spec import JobSpec

HOSTILE_NAMES = [
    "hp.sagemaker_mpi_custom_mpi_options", "hp.sagemaker_distributed_dataparallel_enabled", "hp.SAGEMAKER_program",
    "hp.sagemaker_", "hp.mp_parameters", "hp.output_dir", "hp.checkpoint_dir", "hp.logging_dir", "hp.model_dir",
    "hp.train_dir", "hp.resume_from_checkpoint", "hp.push_to_hub", "hp.push_to_hub_token", "hp.hub_token",
    "hp.hub_model_id", "hp.report_to", "hp.learning_rat", "hp.model_name_or_path", "hp.dataset_name",
]
KEY_WORDS = sorted(keys()) + ["hp.seed", "hp.optim", "hp.2x", "hp.", "mp.", "MAX_RUN", "--spot", "\u2014instances", "x",
                              *HOSTILE_NAMES]
VALUES = [
    "", "0", "1", "2", "-1", "16", "17", "3.5", "1e-5", "nan", "inf", "-inf", "1e999", "99999999999999999999",
    "yes", "no", "TRUE", "off", "maybe", "90m", "2h", "1h30m", "0h", "30d", "\u0663", "1_0",
    "data", "model", "ddp", "none", "qa", "classification", "squad", "mnli", "imdb", "owner/data:cfg",
    "s3://b/p", "/tmp/x", "4.28.1", "4.36", "2.8", "py310", "3.12", "spread", "interleaved",
    '"quoted value"', "'single'", "\u201ccurly\u201d", '"unbalanced', "a b", "\x00", "\u00a0", "<@U1>", "&amp;",
    *instance_names()[:6], "ml.trn1.2xlarge", "ml.nope",
    "wandb", "tensorboard", "none", "all", "--output_dir", "-x LD_PRELOAD=/tmp/x.so", "\x1b[2J", "a\x7fb", "\u202e",
    "\x85", "me/model", "true",
]
#: What the rules below say may never reach a script, whatever it takes.
BOT_PATHS = {"output_dir", "checkpoint_dir", "logging_dir", "model_dir", "train_dir", "test_dir", "output_data_dir",
             "resume_from_checkpoint", "overwrite_output_dir"}


@cache
def script_names(task: str) -> frozenset[str]:
    data = json.loads(SCRIPT_ARGUMENTS_FILE.read_text())
    names = set(data["scripts"][ENTRY_POINTS[task]])
    for listed in data["training_arguments"].values():
        names.update(listed)
    return frozenset(names)


def plain(value: object) -> bool:
    return not isinstance(value, str) or all(unicodedata.category(c) not in ("Cc", "Cs") for c in value)


def assert_may_reach_the_script(hps: Mapping[str, object], task: str) -> None:
    for name, value in hps.items():
        lower = name.lower()
        assert not lower.startswith("sagemaker_") and lower != "mp_parameters", name
        assert lower not in BOT_PATHS, name
        assert not lower.startswith(("push_to_hub", "hub_")), name
        assert name in script_names(task), name
        assert plain(value), (name, value)
        assert not (isinstance(value, str) and value.startswith("--")), (name, value)
        if lower == "report_to":
            assert str(value).strip().lower() in ("none", "tensorboard"), value


def token() -> st.SearchStrategy[str]:
    pair = st.tuples(st.sampled_from(KEY_WORDS), st.sampled_from(VALUES)).map(lambda kv: f"{kv[0]}={kv[1]}")
    bare = st.sampled_from([*PRESETS, *KEY_WORDS, "help", "/train", "\u201c", '"', "'", "="])
    return st.one_of(pair, bare, st.text(max_size=12), hp_token())


def hp_token() -> st.SearchStrategy[str]:
    """hp.NAME=VALUE with a name a script takes, a hostile one or any, and any value (quoted)."""
    names = st.one_of(
        st.sampled_from(sorted(script_names("question-answering") | script_names("text-classification"))),
        st.sampled_from([n.removeprefix("hp.") for n in HOSTILE_NAMES]),
        st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=20),
    )
    values = st.one_of(st.sampled_from(VALUES), st.text(max_size=20))
    return st.tuples(names, values).map(lambda nv: f"'hp.{nv[0]}={nv[1]}'" if "'" not in nv[1] else f"hp.{nv[0]}={nv[1]}")


def check(text: str) -> None:
    try:
        spec = parse_command(text)
    except SpecError as exc:
        assert exc.message and "\n" not in exc.message
        return
    assert isinstance(spec, JobSpec)
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert_may_reach_the_script(spec.hyperparameters, spec.task)
    assert all(plain(getattr(spec, f)) for f in ("model", "dataset", "train_data", "dataset_revision"))
    plan = build_plan(spec, bucket="", lineage_id="<lineage>")
    assert plan.cost.worst_case_usd >= 0
    assert_may_reach_the_script(plan.estimator["hyperparameters"], spec.task)


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


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hp_token(), min_size=1, max_size=6), st.sampled_from(list(PRESETS)))
def test_hyperparameters_that_get_through_may_reach_the_script(tokens: list[str], preset: str) -> None:
    check(preset + " " + " ".join(tokens))
