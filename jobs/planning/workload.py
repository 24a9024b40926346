"""What a job must compute, from its spec alone: how many samples it trains and evaluates, how long each
sequence is, how large the model is, and so how many floating-point operations that takes.

The counts of the known datasets are their published split sizes (the Hugging Face dataset cards): SQuAD
v1.1 trains on 87,599 questions, GLUE MNLI on 392,702 pairs, IMDB on 25,000 reviews. A dataset not listed
here has no known size: a job on it is sized only when it caps its steps (``max_steps``) or its samples.

The arithmetic of a transformer encoder (Kaplan et al. 2020, "Scaling laws", section 2.1): a forward pass
costs about 2 x N FLOPs a token for N non-embedding parameters (N = 12 x layers x hidden^2), plus 4 x seq x
hidden a layer for attention; a training step (forward and backward) three times that.

A causal LM's fine-tune (text-generation) is counted in tokens: examples x their sequence length, through a
decoder whose parameter count is its card's (SwiGLU and grouped-query attention make 12 x layers x hidden^2 a
poor guess). A LoRA run's backward pass computes no gradient of the frozen weights (two passes' worth, not
three, the adapter's own being a rounding error), and checkpointed activations are computed twice.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.planning.hyperparameters import HpValue
from jobs.planning.instances import InstanceType

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec


@dataclass(frozen=True)
class DatasetSize:
    train: int  # training examples
    eval: int  # the split the scripts evaluate (and predict) on
    batch_tokens: int  # typical longest sequence of a batch, in word pieces, when batches are padded per batch


#: Split sizes from the Hugging Face dataset cards; batch_tokens are estimates (SQuAD contexts run past
#: 384 word pieces often, MNLI pairs are ~40 on average, IMDB reviews ~300) used only without pad_to_max_length.
DATASETS: dict[str, DatasetSize] = {
    "squad": DatasetSize(train=87_599, eval=10_570, batch_tokens=384),
    "squad_v2": DatasetSize(train=130_319, eval=11_873, batch_tokens=384),
    "imdb": DatasetSize(train=25_000, eval=25_000, batch_tokens=512),
    "mnli": DatasetSize(train=392_702, eval=9_815, batch_tokens=128),
    "sst2": DatasetSize(train=67_349, eval=872, batch_tokens=64),
    "mrpc": DatasetSize(train=3_668, eval=408, batch_tokens=96),
    "qnli": DatasetSize(train=104_743, eval=5_463, batch_tokens=192),
    "qqp": DatasetSize(train=363_846, eval=40_430, batch_tokens=96),
    "rte": DatasetSize(train=2_490, eval=277, batch_tokens=192),
    "cola": DatasetSize(train=8_551, eval=1_043, batch_tokens=48),
    "ag_news": DatasetSize(train=120_000, eval=7_600, batch_tokens=128),
    "emotion": DatasetSize(train=16_000, eval=2_000, batch_tokens=64),
    "yelp_polarity": DatasetSize(train=560_000, eval=38_000, batch_tokens=512),
    # trl-lib/Capybara: multi-turn chats, ~1,000 tokens as Qwen's tokenizer counts them (capped by max_seq_length).
    "capybara": DatasetSize(train=15_806, eval=200, batch_tokens=1024),
}


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    known: bool = True  # False: guessed from the name
    params: int = 0  # non-embedding parameters from the model's card (decoders); 0: the encoder formula

    @property
    def parameters(self) -> int:
        """Non-embedding parameters (what the matrix multiplications cost)."""
        return self.params or 12 * self.layers * self.hidden * self.hidden

    def train_flops_per_token(self, seq_len: int) -> float:
        """Forward and backward of one token in a sequence of ``seq_len``."""
        return 3.0 * self.forward_flops_per_token(seq_len)

    def forward_flops_per_token(self, seq_len: int) -> float:
        return 2.0 * self.parameters + 4.0 * seq_len * self.hidden * self.layers


#: Encoder shapes of the models people fine-tune most (their configs on the hub).
MODELS: dict[str, ModelShape] = {
    "bert-large-uncased-whole-word-masking": ModelShape(24, 1024),
    "bert-large-cased-whole-word-masking": ModelShape(24, 1024),
    "bert-large-uncased": ModelShape(24, 1024),
    "bert-large-cased": ModelShape(24, 1024),
    "bert-base-uncased": ModelShape(12, 768),
    "bert-base-cased": ModelShape(12, 768),
    "bert-base-multilingual-cased": ModelShape(12, 768),
    "distilbert-base-uncased": ModelShape(6, 768),
    "distilbert-base-cased": ModelShape(6, 768),
    "roberta-large": ModelShape(24, 1024),
    "roberta-base": ModelShape(12, 768),
    "distilroberta-base": ModelShape(6, 768),
    "xlm-roberta-base": ModelShape(12, 768),
    "xlm-roberta-large": ModelShape(24, 1024),
    "microsoft/deberta-v3-base": ModelShape(12, 768),
    "microsoft/deberta-v3-large": ModelShape(24, 1024),
    "google/electra-base-discriminator": ModelShape(12, 768),
    "google/electra-large-discriminator": ModelShape(24, 1024),
    "sentence-transformers/all-minilm-l6-v2": ModelShape(6, 384),
    "nreimers/minilm-l6-h384-uncased": ModelShape(6, 384),
    # Decoders (the LLM presets and their usual peers): non-embedding parameters from their configs.
    "qwen/qwen2.5-0.5b-instruct": ModelShape(24, 896, params=358_000_000),
    "qwen/qwen2.5-1.5b-instruct": ModelShape(28, 1536, params=1_310_000_000),
    "qwen/qwen2.5-7b-instruct": ModelShape(28, 3584, params=6_530_000_000),
    "qwen/qwen2.5-14b-instruct": ModelShape(48, 5120, params=13_100_000_000),
    "meta-llama/llama-3.1-8b-instruct": ModelShape(32, 4096, params=6_980_000_000),
    "mistralai/mistral-7b-instruct-v0.3": ModelShape(32, 4096, params=6_980_000_000),
}
#: A decoder's size in its name (``...-7B-...``, ``1.5b``): billions of parameters, most of them outside the embeddings.
_BILLIONS = re.compile(r"([0-9]{1,3}(?:\.[0-9])?)b")
_NON_EMBEDDING_SHARE = 0.86
#: Name words that give an unknown model's size away, most specific first.
_SIZE_WORDS: tuple[tuple[str, ModelShape], ...] = (
    ("tiny", ModelShape(2, 128, known=False)),
    ("minilm", ModelShape(6, 384, known=False)),
    ("mini", ModelShape(4, 256, known=False)),
    ("small", ModelShape(4, 512, known=False)),
    ("distil", ModelShape(6, 768, known=False)),
    ("xlarge", ModelShape(24, 2048, known=False)),
    ("large", ModelShape(24, 1024, known=False)),
)
_BASE_GUESS = ModelShape(12, 768, known=False)

#: The scripts' defaults (training/script_arguments.py and the Trainer's own).
DEFAULT_EPOCHS = 3.0
DEFAULT_BATCH = 8
DEFAULT_SEQ_LEN = {"question-answering": 384, "text-classification": 128, "text-generation": 1024}
LLM_TASK = "text-generation"


def model_shape(model: str) -> ModelShape:
    """The known shape of ``model``, else a guess from the words in its name (base size when none)."""
    name = model.strip().lower().rstrip("/")
    if name in MODELS:
        return MODELS[name]
    short = name.rsplit("/", 1)[-1]
    for known, shape in MODELS.items():
        if known.rsplit("/", 1)[-1] == short:
            return shape
    words = set(re.split(r"[^a-z0-9.]+", short))
    for word in words:
        billions = _BILLIONS.fullmatch(word)
        if billions:  # a decoder sized by its name: its depth and width are guesses, its parameters are not
            params = int(float(billions.group(1)) * 1e9 * _NON_EMBEDDING_SHARE)
            return ModelShape(32, 4096, known=False, params=params)
    words = {part for word in words for part in word.split(".")}
    for word, shape in _SIZE_WORDS:
        if word in words or (word in ("distil", "minilm") and word in short):
            return shape
    return _BASE_GUESS


def dataset_size(dataset: str) -> DatasetSize | None:
    name = dataset.strip().lower()
    name = name.removeprefix("glue:").removeprefix("glue/")
    return DATASETS.get(name)


@dataclass(frozen=True)
class Workload:
    """The work of one job: samples through the model, sequence length, the model, how it is spread."""

    train_samples: int  # samples the training passes through the model (steps x global batch)
    train_examples: int  # examples the script reads and tokenizes (the split, or max_train_samples)
    eval_samples: int  # evaluation (and prediction) samples, forward only
    steps: int  # optimizer steps
    global_batch: int
    seq_len: int
    model: ModelShape
    half_precision: bool  # fp16 or bf16 mixed precision
    capped_by_steps: bool  # max_steps set the length, not the epochs
    sized: bool  # False: an unknown dataset with no step cap, the counts are a guess
    passes: float = 3.0  # a training token's cost in forward passes (3: forward and a full backward)
    in_tokens: bool = False  # a causal LM's fine-tune: its throughput is said in tokens

    @property
    def eval_flops(self) -> float:
        return self.eval_samples * self.seq_len * self.model.forward_flops_per_token(self.seq_len)

    @property
    def flops_per_sample(self) -> float:
        return self.seq_len * self.passes * self.model.forward_flops_per_token(self.seq_len)

    @property
    def train_tokens(self) -> int:
        return self.train_samples * self.seq_len


def replicas_of(spec: JobSpec, instance: InstanceType) -> int:
    """Copies of the model that each take a batch per step (the data-parallel degree)."""
    gpus = max(1, instance.gpus)
    if spec.distribution in ("data", "ddp", "fsdp"):  # fsdp shards the model but each GPU takes a batch
        return gpus * spec.instance_count
    if spec.distribution == "model":
        processes = (spec.processes_per_host or gpus) * spec.instance_count
        partitions = _int(spec.mp_parameters or {}, "partitions", 1)
        return max(1, processes // max(1, partitions))
    return gpus  # one process a host: the Trainer spreads its batch over the host's GPUs (DataParallel)


def workload_of(
    spec: JobSpec, hyperparameters: dict[str, HpValue] | None = None, *, replicas: int | None = None
) -> Workload:
    """The work ``spec`` asks for; ``hyperparameters`` and ``replicas`` replace the spec's (a backend's
    scaled-down run: other arguments, a few processes)."""
    hps = dict(spec.hyperparameters if hyperparameters is None else hyperparameters)
    size = dataset_size(spec.dataset) if spec.train_data is None and spec.dataset is not None else None
    global_batch = (
        _int(hps, "per_device_train_batch_size", DEFAULT_BATCH)
        * _int(hps, "gradient_accumulation_steps", 1)
        * (replicas or replicas_of(spec, spec.instance))
    )
    examples = size.train if size else None
    if _positive(hps.get("max_train_samples")):
        examples = min(examples or 10**12, _int(hps, "max_train_samples", 0))
    max_steps = _int(hps, "max_steps", 0)
    epochs = _float(hps, "num_train_epochs", DEFAULT_EPOCHS)
    # As the Trainer counts them: max_steps when set, else the epochs times the batches in an epoch.
    steps = max_steps if max_steps > 0 else math.ceil(epochs * math.ceil((examples or 0) / global_batch))
    return Workload(
        train_samples=steps * global_batch if _does(hps, "do_train") else 0,
        train_examples=examples or 0,
        eval_samples=_eval_samples(hps, size),
        steps=steps if _does(hps, "do_train") else 0,
        global_batch=global_batch,
        seq_len=_seq_len(spec.task, hps, size),
        model=model_shape(str(hps.get("model_name_or_path") or spec.model)),
        half_precision=_truthy(hps.get("fp16")) or _truthy(hps.get("bf16")),
        capped_by_steps=max_steps > 0,
        sized=max_steps > 0 or examples is not None,
        passes=_passes(spec, hps),
        in_tokens=spec.task == LLM_TASK,
    )


def _passes(spec: JobSpec, hps: dict[str, HpValue]) -> float:
    """A training token's cost in forward passes: 3, or 2 for a LoRA adapter (no frozen weight's gradient),
    one more where activations are checkpointed (recomputed in the backward pass; FSDP's own included)."""
    if spec.task != LLM_TASK:
        return 3.0
    lora = not (hps.get("use_lora") is False or str(hps.get("use_lora")).lower() == "false")
    recomputed = _truthy(hps.get("gradient_checkpointing")) or spec.distribution == "fsdp"
    return (2.0 if lora else 3.0) + (1.0 if recomputed else 0.0)


def _eval_samples(hps: dict[str, HpValue], size: DatasetSize | None) -> int:
    passes = int(_does(hps, "do_eval")) + int(_truthy(hps.get("do_predict")))
    count = size.eval if size else 0
    if _positive(hps.get("max_eval_samples")):
        count = min(count or 10**12, _int(hps, "max_eval_samples", 0))
    return passes * count


def _seq_len(task: str | None, hps: dict[str, HpValue], size: DatasetSize | None) -> int:
    longest = _int(hps, "max_seq_length", DEFAULT_SEQ_LEN.get(task or "", 128))
    if _truthy(hps.get("pad_to_max_length")) or size is None:
        return longest
    return min(longest, size.batch_tokens)


def _does(hps: dict[str, HpValue], key: str) -> bool:
    # The scripts train and evaluate when none of do_train / do_eval / do_predict is given.
    given = [k for k in ("do_train", "do_eval", "do_predict") if k in hps]
    return _truthy(hps[key]) if key in hps else not given


def _truthy(value: object) -> bool:
    return value is True or str(value).strip().lower() in ("true", "yes", "1", "on")


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _int(hps: dict[str, HpValue] | dict[str, object], key: str, default: int) -> int:
    value = hps.get(key)
    if isinstance(value, bool) or value is None:
        return default
    try:
        return int(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _float(hps: dict[str, HpValue], key: str, default: float) -> float:
    value = hps.get(key)
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if number > 0 and math.isfinite(number) else default
