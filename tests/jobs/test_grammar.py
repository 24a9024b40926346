"""The slash grammar: table tests for what it accepts, and for every way it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.errors import SpecError
from jobs.planning.grammar import help_for, normalize_slack_text, parse_command, parse_duration, tokenize

BASE = "model=bert-base-uncased dataset=squad"

VALID: list[tuple[str, dict[str, Any]]] = [
    ("bert-squad", {"instance_count": 2, "distribution": "data", "preset": "bert-squad"}),
    ("/train bert-squad", {"preset": "bert-squad"}),
    ("/TRAIN bert-squad", {"preset": "bert-squad"}),
    ("train bert-squad", {"preset": "bert-squad"}),
    ("bert-squad instances=4", {"instance_count": 4}),
    ("bert-squad count=3", {"instance_count": 3}),
    ("bert-squad instance_count=1", {"instance_count": 1}),
    ("bert-squad type=ml.p4d.24xlarge", {"instance_type": "ml.p4d.24xlarge"}),
    ("bert-squad instance=p3dn.24xlarge", {"instance_type": "ml.p3dn.24xlarge"}),
    ("bert-squad instance-type=ML.P3.16XLARGE", {"instance_type": "ml.p3.16xlarge"}),
    ("bert-squad distributed=ddp", {"distribution": "ddp", "transformers_version": "4.56.2"}),
    ("bert-squad parallel=torchrun", {"distribution": "ddp"}),
    ("bert-squad --instances=2", {"instance_count": 2}),
    (f"{BASE}", {"task": "question-answering", "instance_type": "ml.p3.2xlarge", "distribution": "none"}),
    (f"{BASE} spot=yes", {"spot": True, "max_wait": 172800}),
    (f"{BASE} spot=YES", {"spot": True}),
    (f"{BASE} spot=True", {"spot": True}),
    (f"{BASE} spot=on", {"spot": True}),
    (f"{BASE} spot=Off", {"spot": False}),
    (f"{BASE} spot=no", {"spot": False}),
    (f"{BASE} spot=false", {"spot": False}),
    (f"{BASE} spot", {"spot": True}),
    (f"{BASE} max_run=3600", {"max_run": 3600}),
    (f"{BASE} max_run=90m", {"max_run": 5400}),
    (f"{BASE} max_run=2h", {"max_run": 7200}),
    (f"{BASE} max_run=1h30m", {"max_run": 5400}),
    (f"{BASE} max_run=45s", {"max_run": 45}),
    (f"{BASE} max_run=1d", {"max_run": 86400}),
    (f"{BASE} spot=yes max_run=1h max_wait=3h", {"max_run": 3600, "max_wait": 10800}),
    (f"{BASE} spot=yes max_run=1h", {"max_wait": 7200}),
    (f"{BASE} task=qa", {"task": "question-answering"}),
    ("model=m dataset=my/reviews task=classification", {"task": "text-classification", "dataset": "my/reviews"}),
    ("model=m dataset=imdb", {"task": "text-classification"}),
    ("model=m dataset=mnli", {"task": "text-classification"}),
    ("model=m train_data=s3://b/p task=qa", {"train_data": "s3://b/p", "dataset": "custom"}),
    ("model=/tmp/tiny-bert train_data=/tmp/data task=qa", {"model": "/tmp/tiny-bert"}),
    (f"{BASE} dataset_revision=main", {"dataset_revision": "main"}),
    (f"{BASE} transformers=4.36", {"transformers_version": "4.36.0", "pytorch_version": "2.1.0", "py_version": "py310"}),
    (f"{BASE} pytorch=2.8 python=3.12", {"transformers_version": "4.56.2"}),
    (f"{BASE} py=py39", {"transformers_version": "4.26.0"}),
    (f"{BASE} spot=yes fallback=yes", {"on_demand_fallback": True}),
    (f"{BASE} spot=yes on_demand_fallback", {"on_demand_fallback": True}),
    (f"{BASE} restarts=0", {"max_restarts": 0}),
    ("model=m dataset=mnli type=ml.p3.16xlarge distribution=model", {"processes_per_host": 8}),
    ("model=m dataset=mnli type=ml.p3.16xlarge distribution=model partitions=2 processes=4", {"processes_per_host": 4}),
    ('bert-squad hp.run_name="my run"', {}),
    ("bert-squad hp.run_name=\u201cmy run\u201d", {}),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_commands(text: str, expected: dict[str, Any]) -> None:
    data = parse_command(text).model_dump(mode="json")
    assert {key: data[key] for key in expected} == expected


HP_CASES: list[tuple[str, dict[str, Any]]] = [
    ("epochs=3", {"num_train_epochs": 3}),
    ("epochs=0.5", {"num_train_epochs": 0.5}),
    ("batch_size=8", {"per_device_train_batch_size": 8}),
    ("eval_batch_size=8", {"per_device_eval_batch_size": 8}),
    ("lr=3e-5", {"learning_rate": 3e-5}),
    ("learning_rate=0.001", {"learning_rate": 0.001}),
    ("steps=50", {"max_steps": 50}),
    ("fp16=yes", {"fp16": True}),
    ("fp16", {"fp16": True}),
    ("do_eval=no", {"do_eval": False}),
    ("lr_scheduler_type=cosine", {"lr_scheduler_type": "cosine"}),
    ("hp.warmup_steps=10", {"warmup_steps": 10}),
    ("hp.label_smoothing_factor=0.1", {"label_smoothing_factor": 0.1}),
    ("hp.optim=adamw_torch", {"optim": "adamw_torch"}),
    ("hp.group_by_length=true", {"group_by_length": True}),
    ("hp.dataloader_num_workers=2", {"dataloader_num_workers": 2}),
    ("hp.fp16=on", {"fp16": True}),
]


@pytest.mark.parametrize(("options", "expected"), HP_CASES)
def test_hyperparameters_are_typed(options: str, expected: dict[str, Any]) -> None:
    hps = parse_command(f"{BASE} {options}").hyperparameters
    assert {key: hps[key] for key in expected} == expected
    for key, value in expected.items():
        assert type(hps[key]) is type(value)


INVALID: list[tuple[str, str]] = [
    ("", "Type a preset"),
    ("   ", "Type a preset"),
    ("/train", "Type a preset"),
    ("help", "help lists the keys"),
    ("bert-sqad", "did you mean bert-squad"),
    ("bert-squad instanses=2", "Unknown key 'instanses': did you mean instances"),
    ("bert-squad spto=yes", "did you mean spot"),
    ("bert-squad bogus", "Unknown key 'bogus'"),
    ('bert-squad hp.run_name="my run', "unbalanced quote"),
    ("bert-squad hp.run_name='my run", "unbalanced quote"),
    ("bert-squad instances=two", "instance_count takes a whole number, not 'two'"),
    ("bert-squad instances=2.5", "whole number"),
    ("bert-squad instances=", "instance_count needs a value"),
    ("bert-squad instances", "instance_count needs a value"),
    ("bert-squad instances=2 count=3", "instance_count is given twice"),
    ("bert-squad instances=0", "between 1 and 16"),
    ("bert-squad instances=17", "between 1 and 16 (TRAINBOT_MAX_INSTANCES), not 17"),
    (f"{BASE} spot=maybe", "spot takes yes or no"),
    (f"{BASE} max_run=soon", "max_run takes a duration such as 3600, 90m, 2h"),
    (f"{BASE} max_run=2x", "max_run takes a duration"),
    (f"{BASE} max_run=0", "max_run must be between 1 second and 28 days"),
    (f"{BASE} max_run=30d", "28 days"),
    (f"{BASE} distribution=magic", "distribution must be one of none, data, model, ddp"),
    (f"{BASE} task=summarization", "task must be one of question-answering, text-classification"),
    (f"{BASE} type=ml.p9.mega", "Unknown instance type"),
    (f"{BASE} type=ml.p3.2xlarg", "did you mean ml.p3.2xlarge"),
    (f"{BASE} hp.2bad=1", "hp.NAME needs a NAME"),
    (f"{BASE} hp.bad-name=1", "hp.NAME needs a NAME"),
    (f"{BASE} hp.model_name_or_path=x", "set by trainbot; use model="),
    (f"{BASE} hp.output_dir=/x", "trainbot sets the job's output"),
    (f"{BASE} lr=fast", "learning_rate takes a number"),
    (f"{BASE} lr=nan", "learning_rate takes a number"),
    (f"{BASE} lr=1e999", "learning_rate takes a number"),
    (f"{BASE} lr=2", "learning_rate must be at most 1"),
    (f"{BASE} lr=0", "learning_rate must be above 0"),
    (f"{BASE} epochs=0", "num_train_epochs must be above 0"),
    (f"{BASE} batch_size=0", "per_device_train_batch_size must be at least 1"),
    (f"{BASE} batch_size=-4", "at least 1"),
    (f"{BASE} fp16=sometimes", "fp16 takes yes or no"),
    (f"{BASE} transformers=four", "takes a version number"),
    (f"{BASE} python=snake", "takes a Python version"),
    (f"{BASE} partitions=2", "need distribution=model"),
    (f"{BASE} mp.pipeline=fast", "mp.pipeline must be one of simple, interleaved"),
    ("model=m", "Say which data to train on"),
    ("dataset=squad", "Say which model to train"),
    ("model=m dataset=someone/data", "Say which task this is"),
    ("model='a b' dataset=squad", "not a usable name"),
    ("model=m train_data=ftp://x task=qa", "train_data must be an s3:// prefix or a local folder"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_commands_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_command(text)
    text_of_error = caught.value.message
    assert message in text_of_error
    assert "\n" not in text_of_error
    assert text_of_error.rstrip().endswith((".", "?"))


def test_max_instances_is_enforced() -> None:
    assert parse_command("bert-squad instances=4", max_instances=4).instance_count == 4
    with pytest.raises(SpecError, match="between 1 and 3"):
        parse_command("bert-squad instances=4", max_instances=3)
    with pytest.raises(SpecError, match="between 1 and 1"):
        parse_command("bert-squad", max_instances=1)


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        ("hp.run_name=\u201cmy run\u201d", 'hp.run_name="my run"'),
        ("hp.run_name=\u2018my run\u2019", "hp.run_name='my run'"),
        ("\u2014instances=2", "instances=2"),  # a typed `--` Slack made an em-dash
        ("--spot=yes hp.x=-1 a -b", "spot=yes hp.x=-1 a -b"),
        ("a\u2013b", "a-b"),
        ("a\u00a0b\u202fc", "a b c"),
        ("a\u200bb", "ab"),
        ("x=&lt;y&gt; &amp;", "x=<y> &"),
    ],
)
def test_normalize_slack_text(raw: str, plain: str) -> None:
    assert normalize_slack_text(raw) == plain


def test_slack_dashes_and_spaces_parse() -> None:
    spec = parse_command("/train\u00a0bert-squad \u2014instances=4 max_run=2h")
    assert spec.instance_count == 4
    assert spec.max_run == 7200


def test_quoted_values_keep_spaces() -> None:
    assert tokenize('/train x=1 hp.note="two words"') == ["x=1", "hp.note=two words"]
    spec = parse_command('bert-squad hp.run_name="two words"')
    assert spec.hyperparameters["run_name"] == "two words"


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("3600", 3600), ("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("2H", 7200), ("1 h 5 min", 3900), ("10s", 10)],
)
def test_durations(raw: str, seconds: int) -> None:
    assert parse_duration(raw, "max_run") == seconds


@pytest.mark.parametrize("raw", ["", "h", "1.5h", "-1h", "\u0663", "1_000", "2 hours ago"])
def test_bad_durations(raw: str) -> None:
    with pytest.raises(SpecError, match="duration"):
        parse_duration(raw, "max_run")


class TestPresetOverrides:
    def test_keys_after_the_preset_override_it(self) -> None:
        spec = parse_command("bert-squad instances=4 epochs=3 fp16=no")
        assert spec.instance_count == 4
        assert spec.hyperparameters["num_train_epochs"] == 3
        assert spec.hyperparameters["fp16"] is False
        assert spec.hyperparameters["max_steps"] == 100  # the rest of the preset stays

    @pytest.mark.parametrize("token", ["max_steps=none", "steps=-1", "max_steps=None", "hp.max_steps=none"])
    def test_max_steps_none_removes_the_presets_step_cap(self, token: str) -> None:
        spec = parse_command(f"bert-squad {token}")
        assert "max_steps" not in spec.hyperparameters
        assert spec.hyperparameters["num_train_epochs"] == 2  # the full epochs train
        assert "max_steps" not in parse_command(f"model=m dataset=squad {token}").hyperparameters

    def test_a_step_cap_below_one_is_still_refused(self) -> None:
        with pytest.raises(SpecError, match="max_steps must be at least 1"):
            parse_command("bert-squad max_steps=0")

    def test_spot_off_drops_the_presets_max_wait(self) -> None:
        spec = parse_command("distilbert-spot spot=no")
        assert (spec.spot, spec.max_wait) == (False, None)

    def test_longer_max_run_moves_the_presets_max_wait(self) -> None:
        spec = parse_command("distilbert-spot max_run=2h")
        assert (spec.max_run, spec.max_wait) == (7200, 14400)

    def test_explicit_max_wait_below_max_run_is_refused(self) -> None:
        with pytest.raises(SpecError, match="max_wait"):
            parse_command("distilbert-spot max_run=2h max_wait=1h")

    def test_leaving_model_parallel_drops_its_parameters(self) -> None:
        spec = parse_command("roberta-mnli distribution=data")
        assert (spec.mp_parameters, spec.processes_per_host) == (None, None)

    def test_model_parallel_parameters_override(self) -> None:
        spec = parse_command("roberta-mnli partitions=2 mp.pipeline=simple mp.ddp=no")
        assert spec.mp_parameters is not None
        assert spec.mp_parameters["partitions"] == 2
        assert spec.mp_parameters["pipeline"] == "simple"
        assert spec.mp_parameters["ddp"] is False
        assert spec.mp_parameters["microbatches"] == 4

    def test_preset_must_come_first(self) -> None:
        with pytest.raises(SpecError, match="Unknown key 'bert-squad'"):
            parse_command("instances=2 bert-squad")


class TestHelp:
    def test_general_help_lists_presets_and_keys(self) -> None:
        text = help_for("help")
        assert text is not None
        for word in ("bert-squad", "roberta-mnli", "distilbert-spot", "instance_count", "hp.NAME=VALUE", "90m"):
            assert word in text

    @pytest.mark.parametrize("text", ["/train help", "HELP", "/train help ", "?"])
    def test_help_variants(self, text: str) -> None:
        assert help_for(text) == help_for("help")

    def test_help_key_and_alias(self) -> None:
        assert help_for("help instances") == help_for("help instance_count")
        assert "how many instances" in (help_for("help instances") or "")

    def test_help_preset(self) -> None:
        assert "data parallel" in (help_for("help bert-squad") or "")

    def test_help_unknown_key_suggests(self) -> None:
        assert "did you mean spot" in (help_for("help spott") or "")

    @pytest.mark.parametrize("text", ["bert-squad", "", "helpme", 'help "'])
    def test_not_help(self, text: str) -> None:
        assert help_for(text) is None
