"""What `/deploy` and `/predict` take: deploy options, endpoint names, prediction inputs and answers (the
inference framework a job can run on is chosen in jobs/planning/serving.py). Pure functions; every refusal is a sentence a person can act on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jobs.errors import BadInput

DEFAULT_INSTANCE_TYPE = "ml.g4dn.xlarge"  # a small GPU, the cheapest common one for HF models
MAX_INSTANCE_COUNT = 10
SERVERLESS_MEMORY_MB = (1024, 2048, 3072, 4096, 5120, 6144)
DEFAULT_MEMORY_MB = 2048
DEFAULT_MAX_CONCURRENCY = 5
MAX_CONCURRENCY = 200
MAX_NAME = 63  # SageMaker's EndpointName limit
ENDPOINT_SUFFIX = "-ep"

_INSTANCE = re.compile(r"ml\.[a-z0-9]+\.[a-z0-9]+")
_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
_TRUE = frozenset({"yes", "true", "on", "1"})
_FALSE = frozenset({"no", "false", "off", "0"})
_KEYS = ("instance_type", "instance_count", "serverless", "memory_mb", "max_concurrency", "name", "alarm", "canary",
         "entry_point", "source_dir")
#: The team's inference handler: HuggingFaceModel(entry_point=, source_dir=), as the toolkit loads it.
_HANDLER_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,120}\.py", re.ASCII)
_HANDLER_DIR = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,250}", re.ASCII)
_ALIASES = {"instances": "instance_count", "memory": "memory_mb", "endpoint": "name", "canary_percent": "canary"}
#: Options that only a promotion into an existing endpoint takes (an update in place, blue/green).
ROLLOUT_KEYS = ("alarm", "canary")
_ALARM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
MAX_CANARY_PERCENT = 50  # SageMaker: a canary is at most half the fleet


@dataclass(frozen=True)
class DeployOptions:
    instance_type: str = DEFAULT_INSTANCE_TYPE
    instance_count: int = 1
    serverless: bool = False
    memory_mb: int = DEFAULT_MEMORY_MB
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    name: str | None = None
    alarm: str | None = None  # promotions: "yes" (the bot names it) or an alarm name; None: no alarm
    canary_percent: int | None = None  # promotions: the canary's share of capacity
    entry_point: str | None = None  # the team's inference handler (inference.py), in source_dir
    source_dir: str | None = None  # its folder in the job's own code (default: the training entry's folder)
    given: frozenset[str] = frozenset()  # the options written (the rest are defaults)


def parse_options(options: dict[str, str]) -> DeployOptions:
    """`instance_type=`, `instance_count=` (`instances=`), `serverless=yes`, `memory_mb=`, `max_concurrency=`,
    `name=`; memory_mb or max_concurrency alone imply serverless."""
    given = {_canonical(key): value.strip() for key, value in options.items()}
    serverless = (
        _bool(given["serverless"], "serverless")
        if "serverless" in given
        else ("memory_mb" in given or "max_concurrency" in given)
    )
    if not serverless and ("memory_mb" in given or "max_concurrency" in given):
        raise BadInput(
            "memory_mb= and max_concurrency= apply to serverless endpoints only: add serverless=yes."
        )
    if serverless and ("instance_type" in given or "instance_count" in given):
        raise BadInput(
            "A serverless endpoint has no instances: drop instance_type=/instance_count=, or drop serverless=yes."
        )
    return DeployOptions(
        instance_type=_instance_type(given.get("instance_type", DEFAULT_INSTANCE_TYPE)),
        instance_count=_bounded(given.get("instance_count", "1"), "instance_count", 1, MAX_INSTANCE_COUNT),
        serverless=serverless,
        memory_mb=_memory(given.get("memory_mb", str(DEFAULT_MEMORY_MB))),
        max_concurrency=_bounded(
            given.get("max_concurrency", str(DEFAULT_MAX_CONCURRENCY)), "max_concurrency", 1, MAX_CONCURRENCY
        ),
        name=check_name(given["name"]) if given.get("name") else None,
        alarm=_alarm(given["alarm"]) if "alarm" in given else None,
        canary_percent=_bounded(given["canary"], "canary", 1, MAX_CANARY_PERCENT) if "canary" in given else None,
        entry_point=_handler_file(given["entry_point"]) if "entry_point" in given else None,
        source_dir=_handler_dir(given["source_dir"]) if "source_dir" in given else None,
        given=frozenset(given),
    )


def _handler_file(raw: str) -> str:
    if not _HANDLER_FILE.fullmatch(raw):
        raise BadInput(f"entry_point= takes the handler's file name, e.g. entry_point=inference.py, not {raw[:60]!r}.")
    return raw


def _handler_dir(raw: str) -> str:
    parts = raw.strip("/").split("/")
    if not _HANDLER_DIR.fullmatch(raw) or raw.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise BadInput(f"source_dir= takes a folder of the job's own code, e.g. source_dir=code, not {raw[:60]!r}.")
    return "/".join(parts)


def _alarm(raw: str) -> str | None:
    """``alarm=yes``: an alarm the bot names for the endpoint; ``alarm=NAME``: that one; ``alarm=no``: none."""
    word = raw.lower()
    if word in _TRUE:
        return "yes"
    if word in _FALSE:
        return None
    if not _ALARM.fullmatch(raw):
        raise BadInput(
            f"alarm={raw!r} is not a CloudWatch alarm name: write alarm=yes (the bot makes one on the endpoint's "
            "5xx errors) or alarm=NAME (letters, digits, '.', '_' and '-')."
        )
    return raw


def _canonical(key: str) -> str:
    key = key.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _KEYS:
        raise BadInput(f"/deploy has no option {key!r}: use {', '.join(k + '=' for k in _KEYS)}.")
    return key


def _bool(raw: str, key: str) -> bool:
    word = raw.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise BadInput(f"{key}={raw!r} is not a yes/no value: write {key}=yes or {key}=no.")


def _bounded(raw: str, key: str, low: int, high: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{key}={raw!r} is not a whole number: write e.g. {key}={low}.") from None
    if not low <= value <= high:
        raise BadInput(f"{key}={value} is out of range: choose {low} to {high}.")
    return value


def _instance_type(raw: str) -> str:
    name = raw.lower()
    if not name.startswith("ml."):
        name = "ml." + name
    if not _INSTANCE.fullmatch(name):
        raise BadInput(
            f"instance_type={raw!r} is not a SageMaker instance type: write e.g. instance_type=ml.g5.xlarge."
        )
    return name


def _memory(raw: str) -> int:
    value = _bounded(raw, "memory_mb", SERVERLESS_MEMORY_MB[0], SERVERLESS_MEMORY_MB[-1])
    if value not in SERVERLESS_MEMORY_MB:
        raise BadInput(
            f"memory_mb={value} is not offered: choose one of {', '.join(map(str, SERVERLESS_MEMORY_MB))}."
        )
    return value


def check_name(name: str) -> str:
    name = name.strip()
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise BadInput(
            f"{name!r} cannot be an endpoint name: use letters, digits and hyphens, at most {MAX_NAME} characters."
        )
    return name


def default_name(lineage_id: str) -> str:
    return f"{lineage_id[: MAX_NAME - len(ENDPOINT_SUFFIX)]}{ENDPOINT_SUFFIX}"


def model_name(endpoint: str, stamp: str) -> str:
    """A unique model name per deploy (models are kept after undeploy, so a redeploy needs a new one)."""
    return f"{endpoint[: MAX_NAME - len(stamp) - 1]}-{stamp}"


# ---------------------------------------------------------------- prediction


#: Text generation: tokens an answer may run to (TGI's ``max_tokens``), by default and at most.
DEFAULT_MAX_NEW_TOKENS = 64
MAX_NEW_TOKENS = 512
TEXT_GENERATION = "text-generation"


def prediction_payload(task: str, inputs: dict[str, str]) -> dict[str, Any]:
    """`question=` and `context=` for question answering, `text=` for classification, as the Hugging Face
    inference toolkit takes them (``{"inputs": ...}``); `prompt=` (and `max_new_tokens=`) for text generation: a
    one-turn chat, as TGI's chat completion takes it on SageMaker's /invocations (the model was fine-tuned on chats,
    rendered by its chat template, which TGI applies to messages); for a team's own handler, `inputs=TEXT` or
    `json='{...}'`, the JSON object its input_fn reads, passed as it is."""
    keys = {key.strip().lower(): value for key, value in inputs.items()}
    if "json" in keys:
        _no_extra(keys, {"json"})
        try:
            body = json.loads(keys["json"])
        except ValueError:
            raise BadInput('json= takes a JSON object, e.g. json=\'{"inputs": "some text"}\'.') from None
        if not isinstance(body, dict):
            raise BadInput('json= takes a JSON object, e.g. json=\'{"inputs": "some text"}\'.')
        return body
    if "inputs" in keys:
        _no_extra(keys, {"inputs"})
        return {"inputs": keys["inputs"]}
    if task == TEXT_GENERATION:
        if not keys.get("prompt"):
            raise BadInput('Say what to ask the model: prompt="..." (and max_new_tokens= for a longer answer).')
        _no_extra(keys, {"prompt", "max_new_tokens"})
        tokens = _bounded(keys.get("max_new_tokens", str(DEFAULT_MAX_NEW_TOKENS)), "max_new_tokens", 1, MAX_NEW_TOKENS)
        return {"messages": [{"role": "user", "content": keys["prompt"]}], "max_tokens": tokens}
    _check_task_inputs(task, keys)
    example = 'question="..." context="..."' if task == "question-answering" else 'text="..."'
    if "prompt" in keys:
        raise BadInput(f"prompt= is for text-generation endpoints; ask this {task} one with {example}.")
    if "question" in keys or "context" in keys:
        if not keys.get("question") or not keys.get("context"):
            raise BadInput('Question answering needs both: question="..." context="...".')
        _no_extra(keys, {"question", "context"})
        return {"inputs": {"question": keys["question"], "context": keys["context"]}}
    if keys.get("text"):
        _no_extra(keys, {"text"})
        return {"inputs": keys["text"]}
    raise BadInput(f"Say what to ask the model: {example}.")


#: What each task's endpoint reads; asked with the other task's inputs it would answer with its tokenizer's error.
TASK_INPUTS = {"question-answering": ('question="..." context="..."', {"question", "context"}),
               "text-classification": ('text="..."', {"text"})}


def _check_task_inputs(task: str, keys: dict[str, str]) -> None:
    example, reads = TASK_INPUTS.get(task, ("", set()))
    others = {key for other, (_, names) in TASK_INPUTS.items() if other != task for key in names} - reads
    given = sorted(others & set(keys))
    if reads and given:
        raise BadInput(f"This endpoint serves {task}: ask it with {example}, not {' and '.join(k + '=' for k in given)}.")


def _no_extra(keys: dict[str, str], allowed: set[str]) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise BadInput(
            f"/predict does not take {', '.join(extra)}: give {' and '.join(k + '=' for k in sorted(allowed))}."
        )


def normalize_answer(raw: Any) -> dict[str, Any]:
    """An answer with ``answer`` and ``score`` whatever the model returned: QA's {answer, score, start,
    end}, classification's [{label, score}], either wrapped in a list."""
    if isinstance(raw, dict) and isinstance(raw.get("choices"), list) and raw["choices"]:  # a chat completion
        message = raw["choices"][0].get("message") if isinstance(raw["choices"][0], dict) else None
        return {"answer": message.get("content") if isinstance(message, dict) else None, "score": None}
    if isinstance(raw, list) and raw:
        raw = raw[0]
    if isinstance(raw, list) and raw:  # a batch of one, classification's [[{...}]]
        raw = raw[0]
    if not isinstance(raw, dict):
        return {"answer": raw, "score": None}
    answer = dict(raw)
    if "answer" not in answer:
        answer["answer"] = answer.get("label", answer.get("generated_text"))
    score = answer.get("score")
    answer["score"] = float(score) if isinstance(score, int | float) else None
    return answer
