"""A team's inference handler (issue 32): ``/deploy JOB entry_point=inference.py [source_dir=DIR]`` takes it as
``HuggingFaceModel(entry_point=..., source_dir=...)`` does, a model folder with ``code/inference.py`` brings its
own, an own-code job without task= deploys when it has one, and /predict passes the JSON the handler reads. The
local endpoint server runs it as the inference toolkit's HuggingFaceHandlerService does (model_fn, input_fn,
predict_fn, output_fn); on moto the CreateModel request equals the SDK's own."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local.endpoint_server import TeamHandler
from jobs.endpoints.options import parse_options, prediction_payload
from jobs.endpoints.port import DeployRequest, InferenceCode
from jobs.errors import BadInput
from jobs.planning.serving import Framework
from tests.support.git_repos import make_repo
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server  # noqa: F401
from tests.support.own_scripts import INFERENCE_HANDLER


def test_deploy_takes_the_handler_and_predict_the_json_it_reads() -> None:
    opts = parse_options({"entry_point": "inference.py", "source_dir": "serving/code"})
    assert (opts.entry_point, opts.source_dir) == ("inference.py", "serving/code")
    for bad in ({"entry_point": "../x.py"}, {"entry_point": "inference.py", "source_dir": "../up"},
                {"entry_point": "inference.py", "source_dir": "/etc"}):
        with pytest.raises(BadInput):
            parse_options(bad)
    assert prediction_payload("", {"json": '{"inputs": ["a", "b"], "parameters": {"k": 1}}'}) == \
        {"inputs": ["a", "b"], "parameters": {"k": 1}}
    assert prediction_payload("", {"inputs": "a sentence"}) == {"inputs": "a sentence"}
    with pytest.raises(BadInput, match="takes a JSON object"):
        prediction_payload("", {"json": "[1, 2]"})


def test_the_local_server_runs_the_teams_handler_as_the_toolkit_does(local_assets: Any, tmp_path: Path) -> None:
    handler = tmp_path / "code"
    handler.mkdir()
    (handler / "inference.py").write_text(INFERENCE_HANDLER)
    served = TeamHandler(local_assets.model_dir, handler, "inference.py", "")
    answer = served(json.dumps({"inputs": ["a first sentence", "another one"]}).encode())
    assert len(answer["vectors"]) == 2 and all(abs(sum(v * v for v in vec) - 1.0) < 1e-4
                                               for vec in answer["vectors"])


def _model_archive(aws: MotoAws) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b'{"model_type": "bert"}'
        member = tarfile.TarInfo("config.json")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    aws.client("s3").put_object(Bucket=aws.bucket, Key="jobs/emb/model.tar.gz", Body=buffer.getvalue())
    return f"s3://{aws.bucket}/jobs/emb/model.tar.gz"


def _archive_members(aws: MotoAws, uri: str) -> list[str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        return sorted(m.name.removeprefix("./") for m in archive.getmembers() if m.isfile())


def test_create_model_with_the_handler_is_the_sdks_own(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    from jobs.backends.sagemaker.endpoints import SageMakerEndpoints
    from jobs.backends.sagemaker.session import build_sdk_session

    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"scripts/train.py": "print('train')\n", "serving/inference.py": INFERENCE_HANDLER,
                          "serving/__pycache__/inference.cpython-311.pyc": "debris"})
    model_data = _model_archive(moto_aws)
    framework = Framework("4.28.1", "2.0.0", "py310")
    request = DeployRequest(
        name="emb-ep", model_name="emb-model-1", model_data=model_data, task="", framework=framework,
        instance_type="ml.g4dn.xlarge", instance_count=1,
        handler=InferenceCode("inference.py", "serving",
                              {"git_config": {"repo": repo.url, "commit": commit}, "source_dir": "./scripts"}))
    recorder = CallRecorder(operation="CreateModel")
    session = moto_aws.boto_session(recorders=[recorder])
    endpoints = SageMakerEndpoints(session, role_arn=moto_aws.role_arn, bucket=moto_aws.bucket,
                                   code_home=tmp_path / "home")
    endpoints.deploy(request)
    sent = recorder.calls[-1]

    # The team's own HuggingFaceModel(entry_point=, source_dir=) with the same model and versions.
    from sagemaker.huggingface import HuggingFaceModel

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "inference.py").write_text(INFERENCE_HANDLER)
    sdk_recorder = CallRecorder(operation="CreateModel")
    from botocore.config import Config

    sdk = build_sdk_session(moto_aws.boto_session(recorders=[sdk_recorder]), bucket=moto_aws.bucket,
                            config=Config(retries={"max_attempts": 1}))
    HuggingFaceModel(model_data=model_data, role=moto_aws.role_arn, name="emb-model-sdk", env={},
                     transformers_version="4.28.1", pytorch_version="2.0.0", py_version="py310",
                     entry_point="inference.py", source_dir=str(checkout), sagemaker_session=sdk).deploy(
        endpoint_name="emb-ep-sdk", initial_instance_count=1, instance_type="ml.g4dn.xlarge", wait=False)
    expected = sdk_recorder.calls[-1]

    def comparable(call: dict[str, Any]) -> dict[str, Any]:
        container = dict(call["PrimaryContainer"])
        container.pop("ModelDataUrl")  # each repack is uploaded under its own model's name
        return {"PrimaryContainer": container, "ExecutionRoleArn": call["ExecutionRoleArn"]}

    assert comparable(sent) == comparable(expected)
    env = sent["PrimaryContainer"]["Environment"]
    assert env["SAGEMAKER_PROGRAM"] == "inference.py" and "HF_TASK" not in env
    assert _archive_members(moto_aws, sent["PrimaryContainer"]["ModelDataUrl"]) == \
        ["code/inference.py", "config.json"]  # the handler, no debris, beside the model
