"""The process behind a local endpoint: a saved model answering over HTTP on 127.0.0.1, as a SageMaker
Hugging Face container does (``GET /ping``, ``POST /invocations`` with ``{"inputs": ...}``).

Run as ``python -m jobs.backends.local.endpoint_server --model DIR --task TASK --state FILE [--config NAME
--serving FILE]``. It loads the model, binds a free loopback port, and only then writes ``{"port", "pid",
"config"}`` to the state FILE (atomically), so a reader never sees a port that does not answer. SIGTERM
ends it.

An update in place (a promotion or a rollback): SIGHUP makes it read the serving FILE (``{"config", "model",
"task"}``), load and try that model beside the one serving, then swap the two with one assignment. A
request takes the model (and its config's name) once, when it starts: requests in flight finish on the old
model, new ones go to the new, and none fails. The state file then names the new config; a model that
does not load or answer leaves the old one serving and the state file says why (``failed_config``,
``error``). Every answer carries the config that gave it (``X-Trainbot-Config``).

`Predictor` is the in-process model: question answering (transformers 5 has no question-answering
pipeline, so the span search is done here, as the old pipeline did it), a text-classification pipeline, or
text generation (a fine-tuned causal LM, its adapter merged in), answering as TGI does on SageMaker: a chat
(``{"messages": [...], "max_tokens": N}``, rendered with the model's chat template) with a chat completion, a raw
prompt (``{"inputs": ..., "parameters": {"max_new_tokens": N}}``) with its continuation.
torch and transformers are imported only inside it: the bot itself never loads them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_LENGTH = 384  # tokens a window of question + context
STRIDE = 128  # overlap of context windows
MAX_ANSWER_TOKENS = 30
MAX_BODY = 1_000_000
IDLE_CONNECTION_SECONDS = 300
MAX_NEW_TOKENS = 64  # text generation, unless the request's parameters say (up to MAX_NEW_TOKENS_LIMIT)
MAX_NEW_TOKENS_LIMIT = 512


class TeamHandler:
    """A team's ``inference.py`` as sagemaker-huggingface-inference-toolkit's HuggingFaceHandlerService loads it:
    the module imported from its folder, and each of ``model_fn(model_dir)``, ``input_fn(body, content_type)``,
    ``predict_fn(data, model)`` and ``output_fn(prediction, accept)`` it defines used in place of the default
    (JSON in, the task's pipeline, JSON out). Called with the decoded request body."""

    def __init__(self, model_dir: Path, folder: Path, entry: str, task: str) -> None:
        import importlib.util

        self.task = task
        spec = importlib.util.spec_from_file_location("inference", folder / entry)
        if spec is None or spec.loader is None:
            raise ValueError(f"{folder / entry} is not a Python file")
        sys.path.insert(0, str(folder))  # the handler imports its siblings, as in the toolkit's code/ folder
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self._input = getattr(module, "input_fn", None)
        self._predict = getattr(module, "predict_fn", None)
        self._output = getattr(module, "output_fn", None)
        model_fn = getattr(module, "model_fn", None)
        self._model = model_fn(str(model_dir)) if model_fn else Predictor(model_dir, task)
        if self._predict is None and not isinstance(self._model, Predictor):
            raise ValueError("inference.py has model_fn but no predict_fn: the toolkit needs both or neither")

    def __call__(self, body: bytes) -> Any:
        data = self._input(body, "application/json") if self._input else json.loads(body)
        prediction = self._predict(data, self._model) if self._predict else self._model(data["inputs"])
        if self._output is None:
            return prediction
        out = self._output(prediction, "application/json")
        return json.loads(out) if isinstance(out, str | bytes) else out


class Predictor:
    """A saved model for one task, called with the inference toolkit's ``inputs`` value."""

    def __init__(self, model_dir: Path, task: str) -> None:
        self.task = task
        if not task:
            raise ValueError("the model serves no task and brings no handler (code/inference.py)")
        if task == "question-answering":
            self._answer = _QuestionAnswerer(model_dir)
        elif task == "text-generation":
            from transformers import pipeline

            self._generate = pipeline("text-generation", model=str(model_dir), tokenizer=str(model_dir))
        else:
            from transformers import pipeline

            self._classify = pipeline("text-classification", model=str(model_dir), tokenizer=str(model_dir))

    def __call__(self, inputs: Any, parameters: Any = None) -> Any:
        if self.task == "text-generation":
            return self._text(inputs, parameters if isinstance(parameters, dict) else {})
        if self.task == "question-answering":
            if not isinstance(inputs, dict) or not inputs.get("question") or not inputs.get("context"):
                raise ValueError('question answering takes {"inputs": {"question": ..., "context": ...}}')
            return self._answer(str(inputs["question"]), str(inputs["context"]))
        if not isinstance(inputs, str | dict | list):
            raise ValueError('text classification takes {"inputs": "some text"}')
        result = self._classify(inputs)
        return [{"label": r["label"], "score": float(r["score"])} for r in result]

    def _text(self, prompt: Any, parameters: dict[str, Any]) -> Any:
        """TGI's answers, greedy: a chat (a list of messages) gets a chat completion, a prompt its continuation."""
        wanted = parameters.get("max_new_tokens", parameters.get("max_tokens", MAX_NEW_TOKENS))
        if not isinstance(wanted, int) or isinstance(wanted, bool) or not 1 <= wanted <= MAX_NEW_TOKENS_LIMIT:
            raise ValueError(f"max_tokens takes a whole number of 1 to {MAX_NEW_TOKENS_LIMIT}")
        if isinstance(prompt, list):
            if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt):
                raise ValueError('a chat takes {"messages": [{"role": "user", "content": "..."}]}')
            chat = self._generate([{"role": str(m.get("role", "user")), "content": m["content"]} for m in prompt],
                                  max_new_tokens=wanted, do_sample=False)
            reply = chat[0]["generated_text"][-1]
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": str(reply["content"])},
                                 "finish_reason": "stop"}]}
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError('text generation takes {"inputs": "a prompt"} or {"messages": [...]}')
        out = self._generate(prompt, max_new_tokens=wanted, do_sample=False, return_full_text=False)
        return [{"generated_text": str(out[0]["generated_text"])}]


class _QuestionAnswerer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self._model = AutoModelForQuestionAnswering.from_pretrained(str(model_dir)).eval()

    def __call__(self, question: str, context: str) -> dict[str, Any]:
        import torch

        encoded = self._tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=MAX_LENGTH,
            stride=STRIDE,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
            return_tensors="pt",
        )
        offsets = encoded.pop("offset_mapping")
        encoded.pop("overflow_to_sample_mapping", None)
        with torch.inference_mode():
            output = self._model(**encoded)
        best: tuple[float, int, int] = (-1.0, 0, 0)
        for window in range(offsets.shape[0]):
            in_context = torch.tensor([s == 1 for s in encoded.sequence_ids(window)])
            found = _best_span(
                output.start_logits[window], output.end_logits[window], in_context, offsets[window]
            )
            best = max(best, found)
        score, start, end = best
        return {"score": score, "start": start, "end": end, "answer": context[start:end]}


def _best_span(start_logits: Any, end_logits: Any, in_context: Any, offsets: Any) -> tuple[float, int, int]:
    """The most likely context span of at most MAX_ANSWER_TOKENS: (probability, start char, end char)."""
    import torch

    mask = torch.where(in_context, 0.0, float("-inf"))
    starts = torch.softmax(start_logits + mask, dim=-1)
    ends = torch.softmax(end_logits + mask, dim=-1)
    scores = torch.triu(starts[:, None] * ends[None, :]).tril(MAX_ANSWER_TOKENS - 1)
    flat = int(torch.argmax(scores))
    first, last = divmod(flat, scores.shape[1])
    return float(scores[first, last]), int(offsets[first][0]), int(offsets[last][1])


_WARM_UP: dict[str, Any] = {
    "question-answering": {"question": "What is it?", "context": "It is a test."},
    "text-classification": "a test",
    "text-generation": "a test",
}


@dataclass(frozen=True)
class Serving:
    """What answers: swapped as one reference, so a request never sees one config's name with another's model."""

    config: str
    model: Path
    predictor: Predictor | TeamHandler


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: a client may send many requests on one connection
    disable_nagle_algorithm = True  # small answers go out at once, not after the client's delayed ACK
    timeout = IDLE_CONNECTION_SECONDS  # an abandoned kept-alive connection frees its thread

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/ping":
            serving = self.server.serving
            self._send(HTTPStatus.OK, {"status": "ok", "task": serving.predictor.task, "config": serving.config},
                       config=serving.config)
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": "GET /ping or POST /invocations"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/invocations":
            self._send(HTTPStatus.NOT_FOUND, {"error": "POST /invocations"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY:
            self._send(HTTPStatus.BAD_REQUEST, {"error": f"send a JSON body of 1 to {MAX_BODY} bytes"})
            return
        serving = self.server.serving  # taken once: a swap from here on does not touch this request
        try:
            body = self.rfile.read(length)
            if isinstance(serving.predictor, TeamHandler):  # the team's input_fn reads the body as it came
                answer = self.server.model_thread.submit(serving.predictor, body).result()
            else:
                request = json.loads(body)
                if "messages" in request:  # TGI's chat completion on /invocations
                    inputs, parameters = request["messages"], {k: request[k] for k in ("max_tokens",) if k in request}
                else:
                    inputs, parameters = request["inputs"], request.get("parameters")
                answer = self.server.model_thread.submit(serving.predictor, inputs, parameters).result()
        except (ValueError, KeyError, TypeError) as exc:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc) or type(exc).__name__}, config=serving.config)
            return
        self._send(HTTPStatus.OK, answer, config=serving.config)

    def _send(self, status: HTTPStatus, body: Any, *, config: str = "") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if config:
            self.send_header("X-Trainbot-Config", config)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        logger.debug("%s " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, serving: Serving, state: Path, serving_file: Path | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.serving = serving
        self.state = state
        self.serving_file = serving_file
        # One model call at a time, always on the same thread: torch's OpenMP pool belongs to the calling
        # thread, and a fresh request thread would build a new one (milliseconds) on every call.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._swapping = threading.Lock()

    def write_state(self, **extra: Any) -> None:
        staging = self.state.with_suffix(".tmp")
        body = {"port": int(self.server_address[1]), "pid": os.getpid(), "config": self.serving.config,
                "model": str(self.serving.model), **extra}
        staging.write_text(json.dumps(body))
        os.replace(staging, self.state)

    def reload_soon(self) -> None:
        """SIGHUP's handler: the load runs on its own thread, never in the signal handler."""
        threading.Thread(target=self.reload, name="swap", daemon=True).start()

    def reload(self) -> None:
        """Load the serving file's model beside the current one, try it once, then swap (see the module
        docstring); one swap at a time."""
        if self.serving_file is None:
            return
        with self._swapping:
            try:
                wanted = json.loads(self.serving_file.read_text())
                config, model, task = str(wanted["config"]), Path(wanted["model"]), str(wanted["task"])
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("no model to swap to: %s", exc)
                return
            if config == self.serving.config:
                return
            try:
                predictor = Predictor(model, task)
                predictor(_WARM_UP[task])  # a model that cannot answer never takes traffic
            except Exception as exc:  # noqa: BLE001 - any failure keeps the old model serving
                logger.error("model %s (%s) did not load; %s keeps serving: %s", model, config,
                             self.serving.config, exc)
                self.write_state(failed_config=config, error=f"{type(exc).__name__}: {exc}"[:300])
                return
            self.serving = Serving(config, model, predictor)  # the swap: one assignment
            self.write_state()
            logger.info("now serving %s (%s)", model, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--task", required=True,
                        choices=("question-answering", "text-classification", "text-generation", ""))
    parser.add_argument("--handler", type=Path, default=None, help="the folder of the team's inference.py")
    parser.add_argument("--handler-entry", default="inference.py", help="the handler's file in that folder")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--config", default="initial", help="the name of the config it serves first")
    parser.add_argument("--serving", type=Path, default=None, help="read on SIGHUP: the model to swap to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until there is a model to swap from
    predictor: Predictor | TeamHandler = (
        TeamHandler(args.model, args.handler, args.handler_entry, args.task) if args.handler is not None
        else Predictor(args.model, args.task)
    )
    server = _Server(Serving(args.config, args.model, predictor), args.state, args.serving)
    signal.signal(signal.SIGHUP, lambda signum, frame: server.reload_soon())
    port = int(server.server_address[1])
    server.write_state()
    server.reload_soon()  # an update asked for while the first model loaded (its SIGHUP was ignored)
    logger.info("serving %s (%s) on http://127.0.0.1:%d/invocations", args.model, args.task, port)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
