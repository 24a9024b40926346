"""One-shot GPU benchmark of the llm-lora preset's script: a Qwen2.5-7B-shaped causal LM (random weights, built
from its config: nothing is downloaded) fine-tuned with a LoRA adapter through training/train_sft.py itself (TRL's
SFTTrainer, PEFT), bf16 with gradient checkpointing, on generated chats; it reports tokens per second, the model
FLOPs utilization (MFU) against the GPU's bf16 peak, and the peak GPU memory.

    PYTHONPATH=. python bench/gpu_llm_lora.py                 # GPU: the 7B shape, bf16
    PYTHONPATH=. python bench/gpu_llm_lora.py --cpu-smoke     # a tiny shape, a few steps, on the CPU

Needs torch, transformers, TRL and PEFT: this interpreter's when it has them, else the newest image's runtime
(.venv-runtimes, built by the local backend or the tests), on which the script is run in-process (so the peak
memory is this process's). MFU counts what the forecast counts (jobs/planning/workload.py): a LoRA step costs
three forward passes of 2 x N FLOPs a token for N non-embedding parameters (forward, the activations' backward,
the checkpointed recompute) plus attention; the peak is the data sheet's dense bf16 (data/instances.json).
Budget: about 3 minutes on one H100-class GPU (model build ~30 s, 2 warm-up and --steps measured steps).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "training"
RUNTIME = ROOT / ".venv-runtimes" / "runtimes" / "transformers5.3.0-pt2.9.0-py312" / "bin" / "python"
#: Qwen2.5-7B's config (its hub card), and a tiny stand-in for the CPU smoke run.
SHAPES = {
    "qwen2.5-7b": {"hidden_size": 3584, "num_layers": 28, "intermediate_size": 18944, "heads": 28, "kv_heads": 4},
    "tiny": {"hidden_size": 64, "num_layers": 2, "intermediate_size": 128, "heads": 4, "kv_heads": 2},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny model, a few steps, on the CPU")
    parser.add_argument("--steps", type=int, default=20, help="measured steps (after 2 warm-up steps)")
    parser.add_argument("--batch", type=int, default=4, help="per device")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak (default: "
                        "the instance table's for the GPU's name)")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if not opts.inner and not _has_llm_libraries():
        if not RUNTIME.exists():
            sys.exit(f"this interpreter lacks TRL or PEFT and {RUNTIME} is not built: run the LLM tests once")
        os.execv(str(RUNTIME), [str(RUNTIME), __file__, *sys.argv[1:], "--inner"])
    run(opts)


def _has_llm_libraries() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "trl", "peft"))


def run(opts: argparse.Namespace) -> None:
    import torch

    sys.path[:0] = [str(ROOT), str(TRAINING)]
    gpu = torch.cuda.is_available() and not opts.cpu_smoke
    if not gpu and not opts.cpu_smoke:
        sys.exit("no GPU here: use --cpu-smoke")
    shape = SHAPES["tiny" if opts.cpu_smoke else "qwen2.5-7b"]
    steps = min(opts.steps, 4) if opts.cpu_smoke else opts.steps
    seq, batch = (128, 4) if opts.cpu_smoke else (opts.seq, opts.batch)
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        root = Path(tmp)
        started = time.monotonic()
        model_dir = build_model(root / "model", shape, half=gpu)
        write_long_chats(root / "data" / "train", n=(steps + 2) * batch, words=seq)
        print(f"built the model and chats in {time.monotonic() - started:.1f} s", flush=True)
        args = ["--model_name_or_path", str(model_dir), "--output_dir", str(root / "out"),
                "--checkpoint_dir", str(root / "ckpt"), "--max_seq_length", str(seq),
                "--per_device_train_batch_size", str(batch), "--max_steps", str(steps + 2), "--learning_rate", "2e-4",
                "--logging_steps", "1", "--save_steps", str(100 * steps), "--do_train", "True", "--do_eval", "False",
                "--gradient_checkpointing", "True", "--lora_r", "16", "--lora_alpha", "32", "--merge_adapter", "False",
                "--bf16", "True" if gpu else "False", *(["--use_cpu", "True"] if not gpu else [])]
        os.environ.update(SM_CHANNEL_TRAIN=str(root / "data" / "train"), HF_HUB_OFFLINE="1",
                          TOKENIZERS_PARALLELISM="false")
        for name in ("SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "SM_CHANNEL_TEST"):
            os.environ.pop(name, None)
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        import train_sft

        wall = time.monotonic()
        code = train_sft.run(args)
        wall = time.monotonic() - wall
        if code != 0:
            sys.exit(f"train_sft.py ended with {code}")
        metrics = json.loads((root / "out" / "metrics.json").read_text())
        report(metrics, shape, seq, gpu, wall, opts.peak_tflops)


def write_long_chats(folder: Path, *, n: int, words: int) -> None:
    """``n`` chats whose answers run past ``words`` tokens, so every sequence is cut at --seq (full batches)."""
    from jobs.backends.local.offline_chat import chat_examples

    folder.mkdir(parents=True)
    with (folder / "chats.jsonl").open("w") as out:
        for chat in chat_examples(n, seed=1):
            answer = chat["messages"][-1]
            answer["content"] = " ".join([answer["content"]] * max(1, words // 4))
            out.write(json.dumps(chat) + "\n")


def build_model(dest: Path, shape: dict[str, int], *, half: bool) -> Path:
    """The tiny LM's tokenizer and chat template, on a decoder of ``shape`` (random weights, bf16 on a GPU)."""
    from jobs.backends.local.offline_chat import build_tiny_causal_lm

    build_tiny_causal_lm(dest, hidden_size=shape["hidden_size"], num_layers=shape["num_layers"],
                         intermediate_size=shape["intermediate_size"], num_heads=shape["heads"],
                         num_kv_heads=shape["kv_heads"], half=half)
    return dest


def non_embedding_parameters(shape: dict[str, int]) -> float:
    """A Llama/Qwen decoder layer: q and o (h x h), k and v (h x h x kv/heads), the SwiGLU MLP (3 x h x i)."""
    h, i = shape["hidden_size"], shape["intermediate_size"]
    kv = h * shape["kv_heads"] // shape["heads"]
    return shape["num_layers"] * (2 * h * h + 2 * h * kv + 3 * h * i)


def report(metrics: dict[str, float], shape: dict[str, int], seq: int, gpu: bool, wall: float,
           peak_tflops: float | None) -> None:
    import torch

    tokens_per_second = float(metrics["train_tokens_per_second"])
    per_token = 3 * (2 * non_embedding_parameters(shape) + 4 * seq * shape["hidden_size"] * shape["num_layers"])
    achieved = tokens_per_second * per_token / 1e12
    if gpu:
        device = torch.cuda.get_device_name(0)
        peak = peak_tflops or bf16_peak(device)
        memory = f"peak_gpu_memory={torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
        mfu = f"mfu={achieved / peak:.1%} of {peak:g} TFLOP/s bf16" if peak else "mfu=? (pass --peak-tflops)"
    else:
        device, mfu = "cpu (not a GPU run: the path checked, no figure worth quoting)", "mfu=n/a on the CPU"
        memory = f"peak_host_memory={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"
    print(f"device={device} shape={shape} seq={seq} non_embedding_params={non_embedding_parameters(shape) / 1e9:.2f}B")
    print(f"train_tokens_per_second={tokens_per_second:,.0f} achieved={achieved:.1f} TFLOP/s {mfu} {memory}"
          f" train_runtime={metrics['train_runtime']:.1f} s (includes 2 warm-up steps) wall={wall:.1f} s"
          f" train_loss={metrics.get('train_loss', float('nan')):.3f}")


def bf16_peak(device: str) -> float | None:
    """The data sheet's dense bf16 TFLOP/s of the GPU named ``device`` (the instance table's accelerators)."""
    families = json.loads((ROOT / "jobs" / "planning" / "data" / "instances.json").read_text())["families"]
    for family in families.values():
        model = str(family["accelerator"]).split()[-1]  # "NVIDIA H200" -> "H200"
        if model in device and family.get("bf16"):
            return float(family["half_tflops"])
    return None


if __name__ == "__main__":
    main()
