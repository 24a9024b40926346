"""Own code in the grammar, the spec and the plan: code=, entry=, metrics=, the allowlist and the article's
estimator arguments. Resolving a REF runs real git on a repository the test makes (tests/backends has the
fetching side)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.backends.code_sources import GitCodeSources
from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.metrics import (
    MAX_DEFINITIONS,
    METRIC_DEFINITIONS,
    METRIC_NAMES,
    MetricScanner,
    definitions_for,
)
from jobs.planning.own_code import SPOT_ENTRY, SPOT_RESUME_NOTE, check_allowed, parse_code
from jobs.planning.plan import build_plan
from jobs.planning.plan_text import render_plan_text
from jobs.planning.reader import CommandReader
from tests.support.git_repos import GitRepo, make_repo

ARTICLE_REPO = "https://github.com/huggingface/transformers.git"
QA_ENTRY = "examples/pytorch/question-answering/run_qa.py"


# -- code= ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "url", "ref"),
    [
        ("git+https://github.com/huggingface/transformers.git@v4.28.1", ARTICLE_REPO, "v4.28.1"),
        ("git+https://github.com/org/repo", "https://github.com/org/repo", None),
        ("git+https://github.com/org/repo.git@feature/x-1", "https://github.com/org/repo.git", "feature/x-1"),
        ("git+ssh://git@github.com/org/repo.git@main", "ssh://git@github.com/org/repo.git", "main"),
        ("git+git@github.com:org/repo.git@0123abc", "git@github.com:org/repo.git", "0123abc"),
        ("git+git@github.com:org/repo.git", "git@github.com:org/repo.git", None),
        ("git+file:///srv/repos/team.git@v1", "file:///srv/repos/team.git", "v1"),
    ],
)
def test_git_code_values(value: str, url: str, ref: str | None) -> None:
    source = parse_code(value)
    assert (source.kind, source.url, source.ref) == ("git", url, ref)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("https://github.com/org/repo.git", "git+https://"),
        ("git+ftp://host/repo.git", "git URL"),
        ("git+https://user:token@github.com/org/repo.git", "password or token"),
        ("git+file:///srv/repos/../secret.git", ". or .."),
        ("git+https://github.com/org/repo.git@-bad", "branch, tag or commit"),
        ("git+https://github.com/org/repo.git@a..b", "branch, tag or commit"),
        ("s3://bucket/code.zip", "s3://BUCKET/KEY.tar.gz"),
        ("s3://bucket/../code.tar.gz", "s3://BUCKET/KEY.tar.gz"),
    ],
)
def test_bad_code_values_are_one_sentence(value: str, says: str) -> None:
    with pytest.raises(SpecError, match=re.escape(says)):
        parse_command(f"model=m dataset=squad code={value} entry=train.py")


@pytest.mark.parametrize("entry", ["/abs/train.py", "../train.py", "a/./train.py", "train.sh", "-x.py", "a b.py", "a//b.py"])
def test_bad_entries(entry: str) -> None:
    with pytest.raises(SpecError, match="entry="):
        parse_command(f"model=m dataset=squad code=git+https://h/r.git entry='{entry}'")


def test_own_code_makes_task_optional_and_needs_an_entry() -> None:
    spec = parse_command("model=m dataset=custom code=git+https://h/r.git entry=scripts/train.py")
    assert spec.task is None and spec.own_code and spec.entry == "scripts/train.py"
    with pytest.raises(SpecError, match="entry=PATH"):
        parse_command("model=m dataset=custom code=git+https://h/r.git")
    with pytest.raises(SpecError, match="task="):
        parse_command("model=m dataset=custom")  # the bot's own scripts still need to know the task
    with pytest.raises(SpecError, match="goes with own code"):
        parse_command("bert-squad entry=x.py")


def test_spec_json_round_trips_with_own_code_fields() -> None:
    spec = parse_command("bert-squad code=git+https://h/r.git@main entry=a/b.py metrics='f1:f1=([0-9.]+)'")
    pinned = spec.model_copy(update={"code_commit": "a" * 40})
    data = pinned.model_dump(mode="json")
    assert {"code", "entry", "code_commit", "metrics", "task"} <= set(data)
    assert type(pinned).model_validate(data) == pinned


# -- the allowlist -------------------------------------------------------------------------------------


def test_unset_allowlist_refuses_own_code_and_says_how_to_allow_it() -> None:
    with pytest.raises(SpecError, match="TRAINBOT_CODE_SOURCES"):
        check_allowed("git+https://github.com/org/repo.git", ())


@pytest.mark.parametrize(
    ("code", "allowed"),
    [
        ("git+https://github.com/org/repo.git@main", True),
        ("git+https://github.com/org-evil/repo.git", False),
        ("git+https://github.com/other/repo.git", False),
        ("s3://team-code/runs/x.tar.gz", True),
        ("s3://team-code-evil/x.tar.gz", False),
        ("git+https://github.com/huggingface/transformers.git@v4.28.1", True),
        ("git+https://github.com/huggingface/transformers-fork.git", False),
    ],
)
def test_allowlist_prefixes_end_at_a_path_boundary(code: str, allowed: bool) -> None:
    prefixes = ("https://github.com/org", "s3://team-code/", "git+https://github.com/huggingface/transformers")
    if allowed:
        check_allowed(code, prefixes)
    else:
        with pytest.raises(SpecError, match="not among the sources"):
            check_allowed(code, prefixes)


def test_reader_refuses_a_source_outside_the_allowlist_before_any_git() -> None:
    reader = CommandReader.of(max_instances=16, code_sources=("https://github.com/org/",), resolver=None)
    with pytest.raises(SpecError, match="not among the sources"):
        reader.read("model=m dataset=squad code=git+https://gitlab.com/x/y.git entry=t.py")


# -- pinning with real git -------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    repo = make_repo(tmp_path / "git")
    repo.commit({"scripts/train.py": "print('one')\n"})
    return repo


def test_the_reader_pins_a_branch_to_the_commit_it_names_now(repo: GitRepo, tmp_path: Path) -> None:
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=GitCodeSources(tmp_path / "home"))
    first = repo.commit({"scripts/train.py": "print('two')\n"})
    spec = reader.read(f"model=m dataset=custom code=git+{repo.url}@main entry=scripts/train.py")
    assert spec.code_commit == first
    moved = repo.commit({"scripts/train.py": "print('three')\n"})
    assert reader.read(f"model=m dataset=custom code=git+{repo.url}@main entry=scripts/train.py").code_commit == moved
    plan = build_plan(spec, bucket="b", lineage_id="l")
    assert plan.estimator["git_config"] == {"repo": repo.url, "branch": "main", "commit": first}
    assert f"@{first[:7]} (main)" in render_plan_text(plan)


def test_an_unknown_ref_is_one_sentence(repo: GitRepo, tmp_path: Path) -> None:
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=GitCodeSources(tmp_path / "home"))
    with pytest.raises(SpecError, match="no branch or tag 'nope'"):
        reader.read(f"model=m dataset=custom code=git+{repo.url}@nope entry=scripts/train.py")


# -- the article's call ----------------------------------------------------------------------------------


def test_the_articles_data_parallel_call_plans_into_the_articles_estimator_arguments() -> None:
    spec = parse_command(f"bert-squad code=git+{ARTICLE_REPO}@v4.28.1 entry={QA_ENTRY}")
    est = build_plan(spec.model_copy(update={"code_commit": "c" * 40}), bucket="b", lineage_id="l").estimator
    assert est["git_config"] == {"repo": ARTICLE_REPO, "branch": "v4.28.1", "commit": "c" * 40}
    assert est["source_dir"] == "./examples/pytorch/question-answering" and est["entry_point"] == "run_qa.py"
    assert est["transformers_version"] == "4.28.1"  # the image the tag matches
    assert est["distribution"] == {"smdistributed": {"dataparallel": {"enabled": True}}}
    assert (est["instance_type"], est["instance_count"]) == ("ml.p3.16xlarge", 2)
    assert est["hyperparameters"] == {
        "model_name_or_path": "bert-large-uncased-whole-word-masking", "dataset_name": "squad",
        "do_train": True, "do_eval": True, "fp16": True, "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 4, "num_train_epochs": 2, "max_seq_length": 384, "max_steps": 100,
        "pad_to_max_length": True, "doc_stride": 128,  # and nothing of the bot's: no output_dir (issue 32)
    }
    assert "checkpoint_s3_uri" not in est and "environment" not in est  # no spot, no checkpoint_minutes=
    # The article passes output_dir itself; a team that types it gets it (a container folder).
    typed = parse_command(f"bert-squad code=git+{ARTICLE_REPO}@v4.28.1 entry={QA_ENTRY} hp.output_dir=/opt/ml/model")
    assert typed.hyperparameters["output_dir"] == "/opt/ml/model"


def test_a_spot_job_with_own_code_runs_its_own_entry_and_says_how_to_resume() -> None:
    spec = parse_command(f"distilbert-spot code=git+{ARTICLE_REPO}@v4.28.1 entry={QA_ENTRY}")
    plan = build_plan(spec.model_copy(update={"code_commit": "c" * 40}), bucket="b", lineage_id="l")
    est = plan.estimator
    # Spot alone: the team's script as its own estimator names it, with the CheckpointConfig spot needs.
    assert est["entry_point"] == "run_qa.py" and "environment" not in est and "dependencies" not in est
    assert est["checkpoint_s3_uri"] == "s3://b/trainbot/l/checkpoints"
    assert "output_dir" not in est["hyperparameters"]
    assert SPOT_RESUME_NOTE in render_plan_text(plan) and "\n" not in SPOT_RESUME_NOTE
    # Saves on the clock asked for: the entry runs the script and adds them to its Trainer.
    clock = build_plan(parse_command(f"distilbert-spot code=git+{ARTICLE_REPO}@v4.28.1 entry={QA_ENTRY} "
                                     "checkpoint_minutes=10").model_copy(update={"code_commit": "c" * 40}),
                       bucket="b", lineage_id="l").estimator
    assert clock["entry_point"] == SPOT_ENTRY
    assert clock["environment"] == {"TRAINBOT_USER_ENTRY": "run_qa.py", "TRAINBOT_CHECKPOINT_MINUTES": "10"}
    shipped = [Path(p) for p in clock["dependencies"]]
    assert [p.name for p in shipped] == [SPOT_ENTRY, "trainbot_checkpoint_folders.py", "trainbot_rank_agreement.py"] and all(p.is_file() for p in shipped)


def test_an_s3_tarball_is_the_sdks_own_source_form() -> None:
    spec = parse_command("model=m dataset=custom code=s3://team-code/run.tar.gz entry=src/train.py")
    est = build_plan(spec, bucket="b", lineage_id="l").estimator
    assert est["source_dir"] == "s3://team-code/run.tar.gz" and est["entry_point"] == "src/train.py"
    assert "git_config" not in est


# -- metrics ----------------------------------------------------------------------------------------------


TRAINER_LINES = [
    # transformers 4.x prints the floats, 5.x formats them as strings; both while training.
    ("{'loss': 0.6931, 'learning_rate': 5e-05, 'epoch': 0.5}", {"loss": 0.6931, "learning_rate": 5e-05, "epoch": 0.5}),
    ("{'loss': '0.6931', 'grad_norm': '1.25', 'learning_rate': '5e-05', 'epoch': '0.5'}",
     {"loss": 0.6931, "grad_norm": 1.25, "learning_rate": 5e-05, "epoch": 0.5}),
    ("{'eval_loss': 0.51, 'eval_accuracy': 0.875, 'eval_runtime': 1.2, 'epoch': 1.0}",
     {"eval_loss": 0.51, "eval_accuracy": 0.875, "epoch": 1.0}),
    ("{'eval_loss': np.float64(0.5), 'eval_f1': np.float64(88.5)}", {"eval_loss": 0.5, "eval_f1": 88.5}),
    # Trainer.log_metrics' table, where run_qa.py reports its evaluation; h:mm:ss runtimes are not numbers.
    ("  eval_exact_match        =      81.25", {"eval_exact_match": 81.25}),
    ("  train_runtime           = 0:01:23.45", {}),
    ("{'train_runtime': 12.5, 'train_samples_per_second': 40.1, 'train_loss': 0.7, 'epoch': 2.0}",
     {"train_runtime": 12.5, "train_samples_per_second": 40.1, "train_loss": 0.7, "epoch": 2.0}),
]


@pytest.mark.parametrize(("line", "expected"), TRAINER_LINES)
def test_the_default_definitions_catch_what_a_trainer_prints(line: str, expected: dict[str, float]) -> None:
    found = {name: value for name, value, _ in MetricScanner.of().scan(line)}
    assert found == pytest.approx(expected)
    for name, value in expected.items():  # the same regexes SageMaker is sent
        (definition,) = [d for d in definitions_for(None) if d["Name"] == name]
        match = re.search(definition["Regex"], line)
        assert match is not None and float(match.group(1)) == pytest.approx(value)


def test_own_metrics_add_to_and_replace_the_defaults() -> None:
    spec = parse_command("bert-squad metrics='bleu:BLEU = ([0-9.]+),loss:my_loss=([0-9.]+),acc:acc {1,2}([0-9]+)'")
    assert spec.metrics == {"bleu": "BLEU = ([0-9.]+)", "loss": "my_loss=([0-9.]+)", "acc": "acc {1,2}([0-9]+)"}
    definitions = build_plan(spec, bucket="b", lineage_id="l").estimator["metric_definitions"]
    assert [d["Name"] for d in definitions] == [*METRIC_NAMES, "step", "bleu", "acc"]  # step: live progress
    assert {"Name": "loss", "Regex": "my_loss=([0-9.]+)"} in definitions
    scanner = MetricScanner.of(definitions)
    assert scanner.scan("step 5: my_loss=0.25 BLEU = 31.5") == [("loss", 0.25, None), ("bleu", 31.5, None)]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("f1", "NAME:REGEX"),
        ("f1:(unclosed", "not a valid regex"),
        ("f1:no group", "needs a (capturing group) around the number"),
        ("9x:([0-9]+)", "Metric name"),
        ("f1:(1),f1:(2)", "defined twice"),
    ],
)
def test_bad_metrics_are_one_sentence(value: str, says: str) -> None:
    with pytest.raises(SpecError, match=re.escape(says)):
        parse_command(f"bert-squad metrics='{value}'")


def test_two_group_regexes_are_read_as_sagemaker_reads_them() -> None:
    # The public examples' pattern: the value is the first group, whatever groups follow (issue 32).
    regex = "'loss': ([0-9]+(.|e\\-)[0-9]+),?"
    plan = build_plan(parse_command(f"bert-squad metrics=\"my_loss:{regex}\""), bucket="b", lineage_id="l")
    assert {"Name": "my_loss", "Regex": regex} in plan.estimator["metric_definitions"]
    scanner = MetricScanner.of(plan.estimator["metric_definitions"])
    assert ("my_loss", 0.6931, None) in scanner.scan("{'loss': 0.6931, 'learning_rate': 5e-05}")
    assert ("my_loss", 0.005, None) in scanner.scan("{'loss': 5e-3}")  # the whole first group, its inner one aside
    with pytest.raises(SpecError, match="backtracking"):  # still RE2: linear whatever the groups
        parse_command("bert-squad metrics='f1:(a)(b)\\2'")


def test_at_most_forty_definitions_in_all() -> None:
    room = MAX_DEFINITIONS - len(METRIC_DEFINITIONS)
    fits = ",".join(f"m{i}:m{i}=([0-9]+)" for i in range(room))
    assert len(build_plan(parse_command(f"bert-squad metrics='{fits}'"), bucket="b", lineage_id="l")
               .estimator["metric_definitions"]) == MAX_DEFINITIONS
    with pytest.raises(SpecError, match="at most 40 metric definitions"):
        parse_command(f"bert-squad metrics='{fits},one_more:x=([0-9]+)'")


# -- what hp.NAME may pass to a team's script -----------------------------------------------------------


def test_own_code_takes_its_scripts_own_names_but_never_the_reserved_ones() -> None:
    own = "model=m dataset=custom code=git+https://h/r.git entry=t.py"
    spec = parse_command(f"{own} hp.my_flag=on hp.temperature=0.7")
    assert spec.hyperparameters == {"my_flag": "on", "temperature": 0.7}
    assert build_plan(spec, bucket="b", lineage_id="l").estimator["hyperparameters"]["my_flag"] == "on"
    with pytest.raises(SpecError, match="not an argument of"):
        parse_command("bert-squad hp.my_flag=on")  # the bot's own scripts take only their names
    for refused, says in (("hp.sagemaker_program=x.py", "sagemaker_"), ("hp.output_dir=/tmp/x", "folder of the job's container"),
                          ("hp.push_to_hub=true", "outside your account"), ("hp.report_to=wandb", "report_to")):
        with pytest.raises(SpecError, match=says):
            parse_command(f"{own} {refused}")
        with pytest.raises(SpecError, match=says):
            parse_command(f"{refused} {own}")  # whatever the order of the keys
