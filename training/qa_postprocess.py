"""Extractive QA: features with doc stride and offsets, n-best span post-processing, SQuAD v1.1 metrics.

In the spirit of transformers' `run_qa` example (its `prepare_*_features` and `postprocess_qa_predictions`),
written against plain lists so it needs neither `datasets` nor `evaluate` (whose metric needs a download).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence
from typing import Any

import numpy as np


def prepare_features(
    tokenizer: Any,
    examples: Sequence[dict],
    max_seq_length: int,
    doc_stride: int,
    pad_to_max_length: bool,
    keep_offsets: bool,
    chunk: int = 1000,
) -> dict[str, list]:
    """Tokenized features: model inputs, start/end positions (CLS when the answer is outside the span),
    and with `keep_offsets` the `example_index` and context-only `offset_mapping` post-processing needs."""
    pad_on_right = tokenizer.padding_side == "right"
    max_len = min(max_seq_length, tokenizer.model_max_length)
    columns: dict[str, list] = collections.defaultdict(list)
    for lo in range(0, len(examples), chunk):
        batch = examples[lo : lo + chunk]
        questions = [e["question"].lstrip() for e in batch]
        contexts = [e["context"] for e in batch]
        enc = tokenizer(
            questions if pad_on_right else contexts,
            contexts if pad_on_right else questions,
            truncation="only_second" if pad_on_right else "only_first",
            max_length=max_len,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding="max_length" if pad_to_max_length else False,
        )
        sample_map = enc.pop("overflow_to_sample_mapping")
        offsets_all = enc.pop("offset_mapping")
        for i, offsets in enumerate(offsets_all):
            input_ids = enc["input_ids"][i]
            cls_index = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
            seq_ids = enc.sequence_ids(i)
            context_id = 1 if pad_on_right else 0
            example = batch[sample_map[i]]
            start_pos, end_pos = _answer_positions(example, offsets, seq_ids, context_id, cls_index)
            for key in enc:
                columns[key].append(np.asarray(enc[key][i], dtype=np.int32))
            columns["start_positions"].append(start_pos)
            columns["end_positions"].append(end_pos)
            if keep_offsets:
                columns["example_index"].append(lo + sample_map[i])
                columns["offset_mapping"].append(
                    [o if seq_ids[k] == context_id else None for k, o in enumerate(offsets)]
                )
    return dict(columns)


def _answer_positions(
    example: dict, offsets: list, seq_ids: list, context_id: int, cls_index: int
) -> tuple[int, int]:
    answers = example.get("answers") or {}
    if not answers.get("answer_start"):
        return cls_index, cls_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    tok_start = 0
    while seq_ids[tok_start] != context_id:
        tok_start += 1
    tok_end = len(offsets) - 1
    while seq_ids[tok_end] != context_id:
        tok_end -= 1
    if not (offsets[tok_start][0] <= start_char and offsets[tok_end][1] >= end_char):
        return cls_index, cls_index
    while tok_start < len(offsets) and seq_ids[tok_start] == context_id and offsets[tok_start][0] <= start_char:
        tok_start += 1
    while seq_ids[tok_end] == context_id and offsets[tok_end][1] >= end_char:
        tok_end -= 1
    return tok_start - 1, tok_end + 1


def postprocess_predictions(
    examples: Sequence[dict],
    example_index: Sequence[int],
    offset_mapping: Sequence[list],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> dict[str, str]:
    """Best answer text per example id, over all of its features' n-best start/end pairs."""
    features_per_example: dict[int, list[int]] = collections.defaultdict(list)
    for feature, ex in enumerate(example_index):
        features_per_example[ex].append(feature)
    predictions: dict[str, str] = {}
    for ex_i, example in enumerate(examples):
        best_score, best_text = -np.inf, ""
        for f in features_per_example.get(ex_i, []):
            offsets = offset_mapping[f]
            starts, ends = start_logits[f], end_logits[f]
            n = len(offsets)
            start_idx = np.argsort(starts[:n])[-1 : -n_best_size - 1 : -1]
            end_idx = np.argsort(ends[:n])[-1 : -n_best_size - 1 : -1]
            for s in start_idx:
                if offsets[s] is None:
                    continue
                for e in end_idx:
                    if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                        continue
                    score = starts[s] + ends[e]
                    if score > best_score:
                        best_score = score
                        best_text = example["context"][offsets[s][0] : offsets[e][1]]
        predictions[str(example["id"])] = best_text
    return predictions


# ----------------------------------------------------------------- the official SQuAD v1.1 evaluation


def normalize_answer(text: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (SQuAD v1.1)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def f1_score(prediction: str, truth: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    truth_tokens = normalize_answer(truth).split()
    common = collections.Counter(pred_tokens) & collections.Counter(truth_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def squad_metrics(examples: Sequence[dict], predictions: dict[str, str]) -> dict[str, float]:
    """`exact_match` and `f1` in percent, each the max over an example's reference answers."""
    em = f1 = 0.0
    scored = 0
    for example in examples:
        truths = (example.get("answers") or {}).get("text") or []
        if not truths:
            continue
        pred = predictions.get(str(example["id"]), "")
        em += max(exact_match_score(pred, t) for t in truths)
        f1 += max(f1_score(pred, t) for t in truths)
        scored += 1
    if scored == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * em / scored, "f1": 100.0 * f1 / scored}
