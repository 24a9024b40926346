"""Training throughput of training/train_qa.py against a plain Trainer loop, plus checkpoint save cost.

    PYTHONPATH=. .venv/bin/python bench/train_throughput.py [--steps 60] [--rounds 4] [--hidden 64 --layers 2]

Both sides train the same generated model on the same generated SQuAD features with the same
TrainingArguments (padded to --seq, a log line every step, no checkpoints during the timed part, same
seed), each in its own process, alternating for --rounds. Steps/s is 1 / the median interval between
per-step lines (robust to a busy machine's spikes); the best round of each side is compared (target ratio >= 0.95:
the script's callbacks, collator and checkpoint logic add no overhead). Then one short run of the script
with checkpoints reports the time of one save (the script's `[checkpoint] saved ... in S s` line) and
the size of a checkpoint folder. Offline: the model is a small random BERT built with `tokenizers`.
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
sys.path[:0] = [str(ROOT), str(TRAINING)]


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SM_")}
    env.update(SM_CHANNEL_TRAIN=str(data), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(TRAINING)]))
    return env


def common_args(model: Path, out: Path, opts: argparse.Namespace) -> list[str]:
    return ["--model_name_or_path", str(model), "--output_dir", str(out), "--max_seq_length", str(opts.seq),
            "--doc_stride", str(opts.seq // 4), "--pad_to_max_length", "True", "--per_device_train_batch_size",
            str(opts.batch), "--max_steps", str(opts.steps), "--learning_rate", "1e-4", "--seed", "1",
            "--logging_steps", "1", "--dataloader_num_workers", "0", "--report_to", "none",
            "--disable_tqdm", "True"]


def plain_trainer_child(argv: list[str]) -> None:
    """A plain Trainer loop: stock TrainingArguments, default collator, no callbacks of ours."""
    import data_channels
    import numpy as np
    import qa_postprocess
    import script_arguments
    import torch
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoTokenizer,
        HfArgumentParser,
        Trainer,
        TrainingArguments,
        default_data_collator,
        set_seed,
    )
    from transformers.trainer_callback import PrinterCallback

    script_args, args, _ = HfArgumentParser((script_arguments.ScriptArguments, TrainingArguments)).parse_args_into_dataclasses(
        args=argv + ["--save_strategy", "no", "--do_train", "True"], return_remaining_strings=True)
    tokenizer = AutoTokenizer.from_pretrained(script_args.model_name_or_path)
    records = data_channels.read_channel(Path(os.environ["SM_CHANNEL_TRAIN"]))
    feats = qa_postprocess.prepare_features(tokenizer, records, script_args.max_seq_length,
                                            script_args.doc_stride, True, keep_offsets=False)
    keys = ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions")
    rows = [{k: torch.as_tensor(np.asarray(feats[k][i]), dtype=torch.long) for k in keys if k in feats}
            for i in range(len(feats["input_ids"]))]
    set_seed(args.seed)
    model = AutoModelForQuestionAnswering.from_pretrained(script_args.model_name_or_path)
    from transformers import TrainerCallback

    class StepStamp(TrainerCallback):  # the plain side's equivalent of the script's per-step line
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                print(f"STEP {state.global_step}", flush=True)

    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=default_data_collator,
                      callbacks=[StepStamp()])
    trainer.remove_callback(PrinterCallback)
    result = trainer.train()
    print("PLAIN " + json.dumps(result.metrics), flush=True)


def _stream(cmd: list[str], env: dict[str, str], step_re: str) -> tuple[int, str, str, list[float]]:
    """Run `cmd`, time-stamping each per-step line as it arrives; (rc, stdout, stderr, step intervals)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=TRAINING, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        lines, stamps = [], []
        for line in proc.stdout:
            if re.match(step_re, line):
                stamps.append(time.perf_counter())
            lines.append(line)
        rc = proc.wait()
        err.seek(0)
        return rc, "".join(lines), err.read(), [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def median_steps_per_second(intervals: list[float]) -> float:
    steady = sorted(intervals[len(intervals) // 10:])  # drop the warm-up tenth
    return 1.0 / steady[len(steady) // 2]


def run_script(model: Path, data: Path, out: Path, opts: argparse.Namespace, extra: list[str]) -> tuple[dict, str, float]:
    args = common_args(model, out, opts) + ["--checkpoint_dir", str(out / "ckpt"), "--do_train", "True"] + extra
    rc, _, stderr, intervals = _stream([sys.executable, "train_qa.py", *args], _env(data), r"\[progress\] step=")
    if rc != 0:
        sys.exit(f"train_qa.py failed ({rc}): {stderr[-2000:]}")
    return json.loads((out / "metrics.json").read_text()), stderr, median_steps_per_second(intervals)


def run_plain(model: Path, data: Path, out: Path, opts: argparse.Namespace) -> float:
    rc, stdout, stderr, intervals = _stream(
        [sys.executable, __file__, "--plain-child", *common_args(model, out, opts)], _env(data), r"STEP ")
    if rc != 0 or "PLAIN " not in stdout:
        sys.exit(f"plain Trainer failed ({rc}): {stderr[-2000:]}")
    return median_steps_per_second(intervals)


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-child":
        plain_trainer_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    opts = parser.parse_args()

    from jobs.backends.local.offline_assets import build_tiny_bert, write_squad_jsonl

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        root = Path(tmp)
        model = build_tiny_bert(root / "model", hidden_size=opts.hidden, num_layers=opts.layers, vocab_size=2000)
        data = root / "data"
        write_squad_jsonl(data, n=max(500, opts.steps * opts.batch // 2), seed=3)
        script_sps, plain_sps = [], []
        for r in range(opts.rounds):
            _, _, sps = run_script(model, data, root / f"script{r}", opts, ["--save_steps", str(10 * opts.steps)])
            script_sps.append(sps)
            plain_sps.append(run_plain(model, data, root / f"plain{r}", opts))
            print(f"round {r + 1}: train_qa.py {script_sps[-1]:.2f} steps/s, plain Trainer {plain_sps[-1]:.2f} steps/s",
                  flush=True)
        best_script, best_plain = max(script_sps), max(plain_sps)  # the least-disturbed round of each
        ratio = best_script / best_plain
        print(f"steps/s  train_qa.py={best_script:.2f}  plain Trainer={best_plain:.2f}  ratio={ratio:.3f}"
              f"  ({'meets' if ratio >= 0.95 else 'BELOW'} the 0.95 target; best of {opts.rounds},"
              f" {opts.steps} steps, batch {opts.batch}, seq {opts.seq}, hidden {opts.hidden} x {opts.layers} layers)")

        save_opts = argparse.Namespace(**{**vars(opts), "steps": 20})
        t0 = time.monotonic()
        _, stderr, _ = run_script(model, data, root / "saves", save_opts, ["--save_steps", "10", "--save_total_limit", "2"])
        elapsed = time.monotonic() - t0
        times = [float(s) for s in re.findall(r"\[checkpoint\] saved checkpoint-\d+ in ([0-9.]+) s", stderr)]
        ckpt = root / "saves" / "ckpt" / "checkpoint-20"
        size = folder_size(ckpt)
        params = sum(1 for _ in ckpt.iterdir())
        print(f"checkpoint save: {', '.join(f'{t:.3f} s' for t in times)} (mean {sum(times) / max(1, len(times)):.3f} s);"
              f" size {size / 1e6:.2f} MB in {params} files (weights + optimizer + scheduler + RNG + trainer state);"
              f" run with saves took {elapsed:.1f} s")


if __name__ == "__main__":
    main()
