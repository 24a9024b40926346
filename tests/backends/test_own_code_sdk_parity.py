"""Own code on SageMaker (moto) is launched exactly as the SDK's own ``HuggingFace(...)`` estimator would launch
it: the CreateTrainingJob the bot sends carries the same channels, hyperparameters and metric definitions as
the request of an estimator the test builds by hand with the same arguments and ``fit()``s with the same inputs.
moto drops MetricDefinitions, so both requests are compared as sent (a botocore event hook records them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.backends.sagemaker.session import build_sdk_session
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.planning.reader import CommandReader
from tests.support.git_repos import make_repo
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401
from tests.support.own_scripts import SPOT_CLASSIFIER

#: Names whose values are the job's own by construction (its name, and where its code was uploaded).
_PER_JOB = ("sagemaker_job_name", "sagemaker_submit_directory")


def _sdk_request(aws: MotoAws, job_name: str, estimator_args: dict[str, Any], inputs: dict[str, str]) -> dict:
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
    # Own code owns its arguments: nothing of the bot's (no model_name_or_path, dataset_name, save_steps).
    assert set(plan.estimator["hyperparameters"]) == {"model_id", "epochs", "fp16", "learning_rate", "output_dir"}
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


def test_a_spot_job_gets_the_entry_and_its_clock_and_no_preset_arguments(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    repo.commit({"scripts/train.py": SPOT_CLASSIFIER})
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=_git(tmp_path),
                              entries=_git(tmp_path))
    spec = reader.read(f"code=git+{repo.url}@main entry=scripts/train.py spot=yes hp.model_id=m")
    assert spec.code_trainer is True and spec.code_saves == 'a checkpoint each epoch (save_strategy="epoch")'
    plan = build_plan(spec, bucket="b", lineage_id="l")
    assert "save_steps" not in plan.estimator["hyperparameters"]
    assert plan.estimator["environment"]["TRAINBOT_CHECKPOINT_MINUTES"] == "10"


def _git(tmp_path: Path) -> Any:
    from jobs.backends.code_sources import GitCodeSources

    return GitCodeSources(tmp_path / "home")
