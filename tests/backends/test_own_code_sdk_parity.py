"""Own code on SageMaker (moto) is launched exactly as the SDK's own ``HuggingFace(...)`` estimator would launch
it: the CreateTrainingJob the bot sends carries the same channels, hyperparameters and metric definitions as
the request of an estimator the test builds by hand with the same arguments and ``fit()``s with the same inputs.
moto drops MetricDefinitions, so both requests are compared as sent (a botocore event hook records them)."""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.sagemaker.session import build_sdk_session
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.planning.reader import CommandReader
from tests.support.git_repos import make_repo
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401
from tests.support.own_scripts import READS_ENVIRONMENT, SPOT_CLASSIFIER, STRICT_HF_PARSER, TWO_GROUP_METRICS

#: Names whose values are the job's own by construction (its name, and where its code was uploaded).
_PER_JOB = ("sagemaker_job_name", "sagemaker_submit_directory")


def _sdk_request(aws: MotoAws, job_name: str, estimator_args: dict[str, Any], inputs: dict[str, str] | None) -> dict:
    """CreateTrainingJob as the SDK sends it for ``HuggingFace(**estimator_args).fit(inputs)``."""
    from botocore.config import Config
    from sagemaker.huggingface import HuggingFace

    recorder = CallRecorder()
    session = aws.boto_session(recorders=[recorder])
    sdk = build_sdk_session(session, bucket=aws.bucket, config=Config(retries={"max_attempts": 1}))
    HuggingFace(**estimator_args, role=aws.role_arn, sagemaker_session=sdk).fit(
        inputs=inputs, wait=False, logs=False, job_name=job_name)
    return recorder.by_name(job_name)


def _comparable(request: dict[str, Any]) -> dict[str, Any]:
    hps = {k: v for k, v in request["HyperParameters"].items() if k not in _PER_JOB}
    return {
        "InputDataConfig": request["InputDataConfig"],
        "HyperParameters": hps,
        "MetricDefinitions": request["AlgorithmSpecification"].get("MetricDefinitions"),
        "TrainingImage": request["AlgorithmSpecification"]["TrainingImage"],
    }


def test_own_code_channels_hyperparameters_and_metrics_are_the_sdks_own(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"scripts/train.py": SPOT_CLASSIFIER})
    data = f"s3://{moto_aws.bucket}/data"
    text = (f"code=git+{repo.url}@main entry=scripts/train.py instance_type=ml.g5.xlarge "
            f"train_data={data}/train test_data={data}/test channel.extra={data}/extra "
            "hp.model_id=distilbert-base-uncased hp.epochs=1 hp.fp16=true hp.learning_rate=5e-5")
    spec = parse_command(text).model_copy(update={"code_commit": commit})
    plan = build_plan(spec, bucket=moto_aws.bucket, lineage_id="parity")
    # Own code owns its arguments: nothing of the bot's (no model_name_or_path, dataset_name, save_steps, output_dir).
    assert set(plan.estimator["hyperparameters"]) == {"model_id", "epochs", "fp16", "learning_rate"}
    assert plan.inputs == {"train": f"{data}/train", "test": f"{data}/test", "extra": f"{data}/extra"}

    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=tmp_path / "home")
    backend.launch("parity-1", plan)
    sent = recorder.by_name("parity-1")

    # The SDK's own estimator with the arguments a team would pass it, and the same fit() inputs.
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "train.py").write_text(SPOT_CLASSIFIER)
    est = plan.estimator
    sdk_args = {key: est[key] for key in ("instance_type", "instance_count", "transformers_version", "pytorch_version",
                                           "py_version", "hyperparameters", "metric_definitions")}
    expected = _sdk_request(moto_aws, "parity-sdk-1", {**sdk_args, "entry_point": "train.py",
                                                        "source_dir": str(checkout / "scripts")}, dict(plan.inputs))

    assert _comparable(sent) == _comparable(expected)
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in sent["InputDataConfig"]}
    assert channels == {"train": f"{data}/train", "test": f"{data}/test", "extra": f"{data}/extra"}
    assert json.loads(sent["HyperParameters"]["model_id"]) == "distilbert-base-uncased"
    # The final "eval_loss = 0.2" lines the examples print are caught by the definitions SageMaker gets.
    import re

    regex = next(d["Regex"] for d in sent["AlgorithmSpecification"]["MetricDefinitions"] if d["Name"] == "eval_loss")
    assert re.search(regex, "eval_loss = 0.2").group(1) == "0.2"  # type: ignore[union-attr]


def test_a_spot_job_gets_no_preset_arguments_and_the_entry_only_with_checkpoint_minutes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    repo.commit({"scripts/train.py": SPOT_CLASSIFIER})
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=_git(tmp_path),
                              entries=_git(tmp_path))
    spec = reader.read(f"code=git+{repo.url}@main entry=scripts/train.py spot=yes hp.model_id=m")
    assert spec.code_trainer is True and spec.code_saves == 'a checkpoint each epoch (save_strategy="epoch")'
    plan = build_plan(spec, bucket="b", lineage_id="l")
    assert plan.estimator["hyperparameters"] == {"model_id": "m"} and "environment" not in plan.estimator
    clock = reader.read(f"code=git+{repo.url}@main entry=scripts/train.py spot=yes hp.model_id=m checkpoint_minutes=10")
    assert build_plan(clock, bucket="b", lineage_id="l").estimator["environment"]["TRAINBOT_CHECKPOINT_MINUTES"] == "10"


def _git(tmp_path: Path) -> Any:
    from jobs.backends.code_sources import GitCodeSources

    return GitCodeSources(tmp_path / "home")


# -- the whole request, field by field (issue 32) --------------------------------------------------------------

#: What differs between two jobs by construction: their names, and where each one's code was uploaded.
_PER_JOB_FIELDS = ("TrainingJobName",)


def _whole(request: dict[str, Any]) -> dict[str, Any]:
    """The request less what is each job's own by construction, and less the bot's tags (the one documented
    difference: trainbot:lineage, launched-by, origin, preset, code)."""
    kept = {k: v for k, v in request.items() if k not in (*_PER_JOB_FIELDS, "Tags")}
    kept["HyperParameters"] = {k: v for k, v in request["HyperParameters"].items() if k not in _PER_JOB}
    return kept


def _uploaded(aws: MotoAws, request: dict[str, Any]) -> list[str]:
    bucket, _, key = json.loads(request["HyperParameters"]["sagemaker_submit_directory"]).removeprefix(
        "s3://").partition("/")
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        return sorted(m.name.removeprefix("./") for m in archive.getmembers())


class Parity:
    """One team repository, the bot's launch of a /train text, and the SDK's own call with a team's arguments."""

    def __init__(self, aws: MotoAws, tmp_path: Path, files: dict[str, str]) -> None:
        self.aws, self.tmp = aws, tmp_path
        self.repo = make_repo(tmp_path / "git", "team")
        self.commit = self.repo.commit(files)
        self.checkout = tmp_path / "checkout"  # what the team has on its laptop, clean
        for name, body in files.items():
            if "__pycache__" in name:
                continue
            (self.checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (self.checkout / name).write_text(body)

    def bot(self, words: str, lineage: str) -> tuple[Any, dict[str, Any]]:
        spec = parse_command(f"code=git+{self.repo.url}@main {words}").model_copy(update={"code_commit": self.commit})
        plan = build_plan(spec, bucket=self.aws.bucket, lineage_id=lineage)
        recorder = CallRecorder()
        backend = sagemaker_backend(self.aws, self.aws.boto_session(recorders=[recorder]), code_home=self.tmp / "home")
        backend.launch(f"{lineage}-1", plan)
        return plan, recorder.by_name(f"{lineage}-1")

    def sdk(self, job_name: str, inputs: dict[str, str] | None = None, **team: Any) -> dict[str, Any]:
        return _sdk_request(self.aws, job_name, team, inputs)

    def layout(self, lineage: str) -> dict[str, str]:
        prefix = f"s3://{self.aws.bucket}/trainbot/{lineage}"
        return {"output_path": f"{prefix}/output", "code_location": f"{prefix}/code"}


def _image(version: str = "4.28.1") -> dict[str, str]:
    return {"4.28.1": {"transformers_version": "4.28.1", "pytorch_version": "2.0.0", "py_version": "py310"},
            "4.17.0": {"transformers_version": "4.17.0", "pytorch_version": "1.10.2", "py_version": "py38"}}[version]


def test_a_strict_parser_with_env_and_two_group_metrics_is_the_sdks_call(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    parity = Parity(moto_aws, tmp_path, {"scripts/train.py": STRICT_HF_PARSER,
                                         "scripts/__pycache__/train.cpython-311.pyc": "debris"})
    data = f"s3://{moto_aws.bucket}/data"
    words = (f"entry=scripts/train.py instance_type=ml.g5.xlarge train_data={data}/train test_data={data}/test "
             f"hp.model_id=distilbert-base-uncased hp.epochs=1 env.MY_FLAG=on metrics={shlex.quote(TWO_GROUP_METRICS)}")
    plan, sent = parity.bot(words, "strict")
    # The team's own HuggingFace(...) with the arguments this text names (and where the bot keeps its files).
    expected = parity.sdk(
        "strict-sdk", {"train": f"{data}/train", "test": f"{data}/test"},
        entry_point="train.py", source_dir=str(parity.checkout / "scripts"), instance_type="ml.g5.xlarge",
        instance_count=1, **_image(), hyperparameters={"model_id": "distilbert-base-uncased", "epochs": 1},
        environment={"MY_FLAG": "on"}, metric_definitions=plan.estimator["metric_definitions"], volume_size=30,
        max_run=86400, use_spot_instances=False, **parity.layout("strict"))
    assert _whole(sent) == _whole(expected)
    assert "CheckpointConfig" not in sent and "--output_dir" not in json.dumps(sent)
    assert set(json.loads(v) for k, v in sent["HyperParameters"].items() if not k.startswith("sagemaker_")) == \
        {"distilbert-base-uncased", 1}
    assert sent["Environment"] == {"MY_FLAG": "on"}
    regexes = {d["Name"]: d["Regex"] for d in sent["AlgorithmSpecification"]["MetricDefinitions"]}
    assert regexes["loss_2g"] == "'loss': ([0-9]+(.|e\\-)[0-9]+),?"
    # The checkout carried a __pycache__ (committed by mistake): the upload is the code alone.
    assert _uploaded(moto_aws, sent) == ["train.py"]
    assert _uploaded(moto_aws, expected) == ["train.py"]


def test_a_spot_job_is_the_sdks_spot_call(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    parity = Parity(moto_aws, tmp_path, {"scripts/train.py": SPOT_CLASSIFIER})
    plan, sent = parity.bot("entry=scripts/train.py instance_type=ml.g5.xlarge spot=yes max_run=1h max_wait=2h "
                            "hp.model_id=m hp.output_dir=/opt/ml/checkpoints", "spot")
    expected = parity.sdk(
        "spot-sdk", entry_point="train.py", source_dir=str(parity.checkout / "scripts"),
        instance_type="ml.g5.xlarge", instance_count=1, **_image(),
        hyperparameters={"model_id": "m", "output_dir": "/opt/ml/checkpoints"}, use_spot_instances=True,
        max_run=3600, max_wait=7200, checkpoint_s3_uri=f"s3://{moto_aws.bucket}/trainbot/spot/checkpoints",
        checkpoint_local_path="/opt/ml/checkpoints", metric_definitions=plan.estimator["metric_definitions"],
        volume_size=30, **parity.layout("spot"))
    assert _whole(sent) == _whole(expected)
    assert sent["CheckpointConfig"] == {"S3Uri": f"s3://{moto_aws.bucket}/trainbot/spot/checkpoints",
                                        "LocalPath": "/opt/ml/checkpoints"}
    assert json.loads(sent["HyperParameters"]["sagemaker_program"]) == "train.py"  # the team's entry, not ours


def test_a_script_for_an_image_older_than_4_26_is_the_sdks_call(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    parity = Parity(moto_aws, tmp_path, {"train.py": READS_ENVIRONMENT})
    plan, sent = parity.bot("entry=train.py instance_type=ml.p3.2xlarge transformers_version=4.17.0 "
                            "env.MY_FLAG=on", "old")
    expected = parity.sdk(
        "old-sdk", entry_point="train.py", source_dir=str(parity.checkout), instance_type="ml.p3.2xlarge",
        instance_count=1, **_image("4.17.0"), hyperparameters={}, environment={"MY_FLAG": "on"},
        metric_definitions=plan.estimator["metric_definitions"], volume_size=30, max_run=86400,
        use_spot_instances=False, **parity.layout("old"))
    assert _whole(sent) == _whole(expected)
    assert "transformers4.17.0" in sent["AlgorithmSpecification"]["TrainingImage"]


def test_checkpoints_on_the_clock_differ_only_by_the_entry_it_asked_for(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    """checkpoint_minutes= is an ask for something the SDK has no argument for: the documented difference is the
    entry that adds the saves (and its two variables), shipped beside the script, and the CheckpointConfig."""
    parity = Parity(moto_aws, tmp_path, {"scripts/train.py": SPOT_CLASSIFIER})
    plan, sent = parity.bot("entry=scripts/train.py instance_type=ml.g5.xlarge checkpoint_minutes=5 hp.model_id=m",
                            "clock")
    for shipped in plan.estimator["dependencies"]:  # a team would have to copy the entry beside its script
        (parity.checkout / "scripts" / Path(shipped).name).write_bytes(Path(shipped).read_bytes())
    expected = parity.sdk(
        "clock-sdk", entry_point="trainbot_spot_entry.py", source_dir=str(parity.checkout / "scripts"),
        instance_type="ml.g5.xlarge", instance_count=1, **_image(),
        hyperparameters={"model_id": "m"}, use_spot_instances=False, max_run=86400,
        environment={"TRAINBOT_USER_ENTRY": "train.py", "TRAINBOT_CHECKPOINT_MINUTES": "5"},
        checkpoint_s3_uri=f"s3://{moto_aws.bucket}/trainbot/clock/checkpoints",
        checkpoint_local_path="/opt/ml/checkpoints", metric_definitions=plan.estimator["metric_definitions"],
        volume_size=30, **parity.layout("clock"))
    assert _whole(sent) == _whole(expected)
    assert _uploaded(moto_aws, sent) == ["train.py", "trainbot_checkpoint_folders.py", "trainbot_rank_agreement.py",
                                       "trainbot_spot_entry.py"]


@pytest.mark.parametrize("words", ["checkpoint_minutes=5 spot=yes", "checkpoint_minutes=0.5"])
def test_checkpoint_minutes_is_acted_on_spot_or_not(words: str) -> None:
    spec = parse_command(f"code=git+https://h/r.git@main entry=t.py {words}").model_copy(
        update={"code_commit": "a" * 40, "code_trainer": True})
    est = build_plan(spec, bucket="b", lineage_id="l").estimator
    assert est["entry_point"] == "trainbot_spot_entry.py" and est["checkpoint_s3_uri"] == "s3://b/trainbot/l/checkpoints"
    assert est["environment"]["TRAINBOT_CHECKPOINT_MINUTES"] == words.split()[0].split("=")[1]
