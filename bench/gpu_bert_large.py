"""One-shot GPU benchmark: a bert-large-shaped QA model (random weights, seq 384) trained through
training/train_qa.py itself, in bf16 (or fp16), reporting samples per second.

    PYTHONPATH=. python bench/gpu_bert_large.py                 # GPU: bf16 if supported, else fp16
    PYTHONPATH=. python bench/gpu_bert_large.py --cpu-smoke     # tiny sizes, CPU, checks the path here

Needs only torch, transformers (with its tokenizers) and accelerate; offline: the tokenizer is a WordPiece
vocabulary trained on generated text (so the embedding matrix is smaller than bert-large's 30522 rows,
a rounding error next to its 24 x 1024 encoder). Nothing else depends on this script. Budget: well under
4 minutes on one modern GPU (model build ~20 s, 2 x process start, --steps steps).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "training"
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model, few steps, on the CPU")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32, help="per device")
    parser.add_argument("--seq", type=int, default=384)
    parser.add_argument("--precision", choices=("auto", "bf16", "fp16", "fp32"), default="auto")
    opts = parser.parse_args()

    import torch

    from jobs.backends.local.offline_assets import build_tiny_bert, write_squad_jsonl

    if opts.cpu_smoke:
        shape = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128}
        opts.steps, opts.batch, opts.seq, precision = min(opts.steps, 6), 4, 128, "fp32"
    else:
        if not torch.cuda.is_available():
            sys.exit("no GPU here: use --cpu-smoke")
        shape = {"hidden_size": 1024, "num_layers": 24, "num_heads": 16, "intermediate_size": 4096}
        precision = opts.precision
        if precision == "auto":
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"

    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root = Path(tmp)
        t0 = time.monotonic()
        model = build_tiny_bert(root / "model", vocab_size=8000, **shape)
        data = root / "data"
        write_squad_jsonl(data / "train", n=opts.steps * opts.batch, seed=1)
        write_squad_jsonl(data / "test", n=64, seed=2)
        print(f"built model and data in {time.monotonic() - t0:.1f} s", flush=True)
        args = ["--model_name_or_path", str(model), "--output_dir", str(root / "out"),
                "--checkpoint_dir", str(root / "ckpt"), "--max_seq_length", str(opts.seq), "--doc_stride", str(opts.seq // 3),
                "--pad_to_max_length", "True", "--per_device_train_batch_size", str(opts.batch),
                "--per_device_eval_batch_size", str(opts.batch), "--max_steps", str(opts.steps),
                "--learning_rate", "3e-5", "--logging_steps", str(max(1, opts.steps // 4)),
                "--save_steps", str(10 * opts.steps), "--do_train", "True", "--do_eval", "True",
                "--dataloader_num_workers", "2"]
        if precision in ("bf16", "fp16"):
            args += [f"--{precision}", "True"]
        env = dict(os.environ, SM_CHANNEL_TRAIN=str(data / "train"), SM_CHANNEL_TEST=str(data / "test"),
                   HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        env.pop("SM_MODEL_DIR", None)
        env.pop("SM_OUTPUT_DATA_DIR", None)
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "train_qa.py", *args], cwd=TRAINING, env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"train_qa.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        metrics = json.loads((root / "out" / "metrics.json").read_text())
        progress = re.findall(r"\[progress\] step=(\d+) .* eta_s=", proc.stdout)
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() and not opts.cpu_smoke else "cpu"
        print(f"device={device} precision={precision} shape={shape} seq={opts.seq} batch={opts.batch}"
              f" steps={opts.steps} logged_steps={progress}")
        print(f"train_samples_per_second={metrics['train_samples_per_second']:.2f}"
              f" (includes the first, warm-up steps) train_runtime={metrics['train_runtime']:.1f} s"
              f" process wall={wall:.1f} s eval_f1={metrics.get('eval_f1', float('nan')):.1f}")


if __name__ == "__main__":
    main()
