"""A team's inference handler on a local endpoint, end to end (issue 32): ``/deploy JOB entry_point=inference.py
source_dir=serving`` checks the handler out of the job's own repository at its pinned commit, the endpoint's
process loads it as sagemaker-huggingface-inference-toolkit does (``model_fn``, ``input_fn``, ``predict_fn``,
``output_fn``), and ``/predict json='{...}'`` gets the handler's own answer over HTTP. A model folder that carries
``code/inference.py`` is served by it with no entry_point=. The model is the session's tiny BERT (no task: an
embedding model)."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest

from jobs.backends.local.endpoints import LocalEndpoints
from jobs.backends.local.offline_assets import LocalAssets
from jobs.clock import SystemClock
from jobs.endpoints.options import prediction_payload
from jobs.endpoints.port import DeployRequest, InferenceCode
from jobs.errors import BadInput, NotFound
from tests.support.git_repos import make_repo
from tests.support.own_scripts import INFERENCE_HANDLER
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

#: The handler's own input_fn and output_fn beside the embedding model_fn/predict_fn: the toolkit's defaults are
#: replaced, so the answer shows the team's code ran (``"by": "team"``, the sentences it was given, counted).
HANDLER = INFERENCE_HANDLER + '''

import json

from textutil import clean  # a sibling module of the handler's folder, as in the toolkit's code/


def input_fn(body, content_type):
    data = json.loads(body)
    return {"inputs": [clean(s) for s in data["sentences"]]}


def output_fn(prediction, accept):
    return json.dumps({"by": "team", "count": len(prediction["vectors"]), "dims": len(prediction["vectors"][0])})
'''
TEXTUTIL = "def clean(text):\n    return ' '.join(text.split()).lower()\n"


def _deployed(backend: LocalEndpoints, request: DeployRequest) -> None:
    backend.deploy(request)
    wait_for(lambda: backend.describe(request.name).status != "Creating", f"endpoint {request.name} to load")
    described = backend.describe(request.name)
    assert described.status == "InService", described.failure_reason


def test_deploy_with_entry_point_then_predict_runs_the_teams_handler(local_assets: LocalAssets, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"scripts/train.py": "print('train')\n", "serving/inference.py": HANDLER,
                          "serving/textutil.py": TEXTUTIL})
    backend = LocalEndpoints(tmp_path / "home", SystemClock())
    request = DeployRequest(
        name="emb-ep", model_name="emb-model-1", model_data=str(local_assets.model_dir), task="", framework=None,
        instance_type="local", instance_count=1,
        handler=InferenceCode("inference.py", "serving",
                              {"git_config": {"repo": repo.url, "commit": commit}, "source_dir": "./scripts"}))
    try:
        _deployed(backend, request)
        payload = prediction_payload("", {"json": '{"sentences": ["A  First sentence", "another ONE"]}'})
        answer = backend.invoke("emb-ep", payload)
        assert answer["by"] == "team" and answer["count"] == 2 and answer["dims"] > 8
        with pytest.raises(BadInput, match="refused the inputs"):  # the handler's own input_fn refuses it
            backend.invoke("emb-ep", prediction_payload("", {"inputs": "no sentences key"}))
    finally:
        with contextlib.suppress(NotFound):
            backend.delete("emb-ep")


def test_a_model_with_code_inference_py_is_served_by_it(local_assets: LocalAssets, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(local_assets.model_dir, model)
    (model / "code").mkdir()
    (model / "code" / "inference.py").write_text(INFERENCE_HANDLER)
    backend = LocalEndpoints(tmp_path / "home", SystemClock())
    request = DeployRequest(name="emb-code", model_name="emb-code-1", model_data=str(model), task="",
                            framework=None, instance_type="local", instance_count=1)
    try:
        _deployed(backend, request)
        answer = backend.invoke("emb-code", prediction_payload("", {"json": json.dumps({"inputs": ["a", "b c"]})}))
        assert len(answer["vectors"]) == 2
        assert all(abs(sum(v * v for v in vector) - 1.0) < 1e-4 for vector in answer["vectors"])
    finally:
        with contextlib.suppress(NotFound):
            backend.delete("emb-code")
