"""Offline stand-ins for the LLM recipes: a tiny causal language model (a Llama-shaped config, random weights,
a byte-level BPE tokenizer with a chat template) and generated chat data, built here without the hub.

The chats are templated (a question about one of a few things, answered with that thing's fixed colour), so a
few dozen LoRA steps on the tiny model visibly lower its evaluation loss. Built by whichever transformers runs
the job (an image runtime's), like the tiny BERT of `offline_assets`; only the standard library is imported at
module level.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.local.offline_assets import build_once

#: Bump when the generated model or chats change, so an old cache is not reused.
CHAT_ASSETS_VERSION = "chat-v2"  # v2: room for 4,096 positions (the GPU bench)
#: ChatML, as Qwen's instruct models render a conversation; the generation prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_THINGS = {"sky": "blue", "grass": "green", "sun": "yellow", "snow": "white", "coal": "black", "rose": "red",
           "sea": "blue", "leaf": "green", "cloud": "grey", "orange": "orange"}
_ASKS = ("what colour is the {x} ?", "tell me the colour of the {x} .", "which colour does the {x} have ?")
_SYSTEM = "you answer in one short sentence ."


def chat_examples(n: int, seed: int) -> list[dict]:
    """``n`` chats: a question about a thing's colour and the one answer it always gets."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        thing = rng.choice(sorted(_THINGS))
        turns = [{"role": "system", "content": _SYSTEM}] if rng.random() < 0.5 else []
        turns += [{"role": "user", "content": rng.choice(_ASKS).format(x=thing)},
                  {"role": "assistant", "content": f"the {thing} is {_THINGS[thing]} ."}]
        chats.append({"messages": turns})
    return chats


def write_chat_jsonl(folder: Path, n: int, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "chats.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for record in chat_examples(n, seed):
            fh.write(json.dumps(record) + "\n")
    return path


def _corpus(seed: int) -> list[str]:
    lines = [" ".join(turn["content"] for turn in chat["messages"]) for chat in chat_examples(400, seed)]
    return lines + ["user assistant system", " ".join(_THINGS) + " " + " ".join(_THINGS.values())]


def build_tiny_causal_lm(dest: Path, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2,
                         vocab_size: int = 512, intermediate_size: int | None = None, num_heads: int = 4,
                         num_kv_heads: int = 2, half: bool = False) -> Path:
    """A randomly initialised Llama-shaped causal LM and its byte-level BPE tokenizer (with CHAT_TEMPLATE), saved
    to ``dest``: it loads with ``AutoTokenizer`` and ``AutoModelForCausalLM``, and its decoder layer class
    (``LlamaDecoderLayer``) is what FSDP wraps. ``half``: built and saved in bf16 (a 7B shape for a benchmark)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers import set_seed as hf_set_seed
    from transformers.utils import logging as hf_logging

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_corpus(seed), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, model_max_length=4096)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(dest))
    hf_set_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=hidden_size, intermediate_size=intermediate_size or hidden_size * 2,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        eos_token_id=tok.token_to_id("<|im_end|>"), pad_token_id=tok.token_to_id("<|endoftext|>"), bos_token_id=None,
        tie_word_embeddings=True,
    )
    import torch

    hf_logging.disable_progress_bar()  # built inside the console or CLI process: no bar in the transcript
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if half else torch.float32)
    try:
        LlamaForCausalLM(config).save_pretrained(str(dest))
    finally:
        torch.set_default_dtype(default)
        hf_logging.enable_progress_bar()
    return dest


@dataclass(frozen=True)
class ChatAssets:
    """Where `ensure_chat_assets` put things; the channel folders hold one ``chats.jsonl`` each."""

    root: Path
    model_dir: Path
    train: Path
    test: Path

    def channels_for(self, dataset: str) -> tuple[Path, Path]:
        """(train, test) channels: generated chats stand in for any chat dataset."""
        return self.train, self.test


def _layout(root: Path) -> ChatAssets:
    return ChatAssets(root=root, model_dir=root / "tiny-causal-lm", train=root / "chat" / "train",
                      test=root / "chat" / "test")


def ensure_chat_assets(home: Path, *, train_size: int = 600, test_size: int = 100) -> ChatAssets:
    """Build the tiny causal LM and the chat channels once under ``home/assets``; later calls reuse them."""

    def build(staging: Path) -> None:
        layout = _layout(staging)
        build_tiny_causal_lm(layout.model_dir)
        write_chat_jsonl(layout.train, train_size, seed=7)
        write_chat_jsonl(layout.test, test_size, seed=8)

    return _layout(build_once(Path(home) / "assets", CHAT_ASSETS_VERSION, build,
                              lock_name=f".{CHAT_ASSETS_VERSION}.lock"))
