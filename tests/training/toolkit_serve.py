"""Serve a model folder with the Hugging Face inference toolkit's handler service, as the inference image's
model server does, and answer one request: `python toolkit_serve.py MODEL_DIR '{"inputs": ...}'`.

Run in the transformers 4.28 venv (sagemaker-huggingface-inference-toolkit, sagemaker-inference and the
`mms` package of multi-model-server). Prints the handler's response body on stdout.
"""

from __future__ import annotations

import json
import sys

from mms.context import Context, RequestProcessor
from mms.metrics.metrics_store import MetricsStore
from sagemaker_huggingface_inference_toolkit.handler_service import HuggingFaceHandlerService


def main(model_dir: str, body: str) -> int:
    context = Context("model", model_dir, {}, 1, -1, "1.0")  # name, dir, manifest, batch size, gpu, version
    context.request_processor = [RequestProcessor({"Content-Type": "application/json", "Accept": "application/json"})]
    context.metrics = MetricsStore("request", "model")
    service = HuggingFaceHandlerService()
    service.initialize(context)
    (response,) = service.handle([{"body": body.encode()}], context)
    print(response if isinstance(response, str) else json.dumps(response))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
