"""Offline stand-ins for the hub: a tiny BERT and generated SQuAD / MNLI / IMDB channel files.

Nothing here downloads anything. The generated data is templated so that a tiny randomly initialised
BERT learns it in seconds (the answer follows a cue word; the label is decided by keywords), which lets
tests and the local backend show a fine-tune that clearly beats a trivial baseline.

Only the standard library is imported at module level; `tokenizers` and `transformers` are imported
inside the builders.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.file_lock import exclusive_lock

logger = logging.getLogger(__name__)

#: Bump when the generated assets change, so an old cache is not reused.
ASSETS_VERSION = "v2"  # v2: class labels are names, as the hub's ClassLabel features have them

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi", "jo", "bo"]
_FILLER = (
    "the a river mountain quiet small large old new market bridge garden station road village harbour "
    "people often walk along near every morning evening winter summer long short bright dark green "
    "stone wooden famous local visitors travel through between beside under over tower museum school "
    "library festival song story history season weather rain wind snow sun cloud field forest lake"
).split()
_ATTRIBUTES = {  # question word -> (cue sentence template, question template)
    "city": ("the city is {x} .", "what is the city ?"),
    "captain": ("the captain is called {x} .", "who is the captain ?"),
    "ship": ("their ship was named {x} .", "what was the ship named ?"),
}
_NLI_KEYWORDS = {  # label -> words that decide it (MNLI order: entailment, neutral, contradiction)
    0: ["certainly", "indeed", "surely", "definitely"],
    1: ["perhaps", "maybe", "possibly", "sometimes"],
    2: ["never", "not", "nobody", "nothing"],
}
#: The hub datasets' ClassLabel names (glue/mnli, imdb), which the generated records carry as labels.
MNLI_LABELS = ("entailment", "neutral", "contradiction")
IMDB_LABELS = ("neg", "pos")
_SENTIMENT_KEYWORDS = {
    0: ["awful", "boring", "terrible", "dull", "worst"],
    1: ["great", "wonderful", "brilliant", "superb", "best"],
}


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))


def _filler_sentence(rng: random.Random, lo: int = 4, hi: int = 9) -> str:
    return " ".join(rng.choice(_FILLER) for _ in range(rng.randint(lo, hi))) + " ."


def squad_examples(n: int, seed: int) -> list[dict]:
    """`n` flat-SQuAD records: a few filler sentences and facts; the question asks for one fact."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        attrs = rng.sample(sorted(_ATTRIBUTES), k=rng.randint(1, len(_ATTRIBUTES)))
        values = {a: _name(rng) for a in attrs}
        sentences = [_filler_sentence(rng) for _ in range(rng.randint(1, 4))]
        for a in attrs:
            sentences.insert(rng.randint(0, len(sentences)), _ATTRIBUTES[a][0].format(x=values[a]))
        asked = rng.choice(attrs)
        context = " ".join(sentences)
        cue = _ATTRIBUTES[asked][0].format(x=values[asked])
        start = context.index(cue) + cue.index(values[asked])
        records.append(
            {
                "id": f"q{seed}-{i}",
                "title": "generated",
                "context": context,
                "question": _ATTRIBUTES[asked][1],
                "answers": {"text": [values[asked]], "answer_start": [start]},
            }
        )
    return records


def mnli_examples(n: int, seed: int) -> list[dict]:
    """`n` MNLI-style records; the label is decided by a keyword in the hypothesis."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        label = rng.randrange(3)
        words = _filler_sentence(rng, 3, 7).split()
        words.insert(rng.randint(0, len(words) - 1), rng.choice(_NLI_KEYWORDS[label]))
        records.append(
            {"premise": _filler_sentence(rng, 6, 12), "hypothesis": " ".join(words), "label": MNLI_LABELS[label]}
        )
    return records


def imdb_examples(n: int, seed: int) -> list[dict]:
    """`n` IMDB-style records; the label is decided by sentiment keywords in the text."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        label = rng.randrange(2)
        words = " ".join(_filler_sentence(rng) for _ in range(rng.randint(2, 4))).split()
        for _ in range(rng.randint(1, 2)):
            words.insert(rng.randint(0, len(words) - 1), rng.choice(_SENTIMENT_KEYWORDS[label]))
        records.append({"text": " ".join(words), "label": IMDB_LABELS[label]})
    return records


def _write_jsonl(folder: Path, name: str, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return path


def write_squad_jsonl(folder: Path, n: int, seed: int) -> Path:
    return _write_jsonl(Path(folder), "squad.jsonl", squad_examples(n, seed))


def write_mnli_jsonl(folder: Path, n: int, seed: int) -> Path:
    return _write_jsonl(Path(folder), "mnli.jsonl", mnli_examples(n, seed))


def write_imdb_jsonl(folder: Path, n: int, seed: int) -> Path:
    return _write_jsonl(Path(folder), "imdb.jsonl", imdb_examples(n, seed))


def default_corpus(seed: int = 0) -> list[str]:
    """Text covering every word the generators produce, for training the tokenizer."""
    rng = random.Random(seed)
    lines = [" ".join(_FILLER), " ".join(_SYLLABLES)]
    lines += [tpl.format(x=_name(rng)) + " " + q for tpl, q in _ATTRIBUTES.values() for _ in range(50)]
    lines += [" ".join(words) for words in (*_NLI_KEYWORDS.values(), *_SENTIMENT_KEYWORDS.values())]
    lines += [r["context"] for r in squad_examples(300, seed)]
    lines += [r["premise"] + " " + r["hypothesis"] for r in mnli_examples(300, seed)]
    lines += [r["text"] for r in imdb_examples(300, seed)]
    return lines


def build_tiny_bert(
    dest: Path,
    *,
    corpus: list[str] | None = None,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 1000,
    num_heads: int | None = None,
    intermediate_size: int | None = None,
) -> Path:
    """A randomly initialised small BERT and a WordPiece tokenizer trained on `corpus`, saved to `dest`.

    The folder loads with `AutoTokenizer` (fast, with offsets) and any `AutoModelFor*` (the heads are
    initialised on load); weights are safetensors.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast
    from transformers import set_seed as hf_set_seed

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        corpus if corpus is not None else default_corpus(seed),
        trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=special, min_frequency=1, show_progress=False
        ),
    )
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=512,
    )
    fast.save_pretrained(str(dest))

    hf_set_seed(seed)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads or max(1, hidden_size // 32),
        intermediate_size=intermediate_size or hidden_size * 2,
        max_position_embeddings=512,
        pad_token_id=tok.token_to_id("[PAD]"),
    )
    # The bot builds this inside the console or CLI process: transformers' shard progress bar would
    # land in the person's transcript.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # safetensors where it is installed (an image runtime of transformers 4.x may lack it: then torch's format).
    import importlib.util

    safe = importlib.util.find_spec("safetensors") is not None
    try:
        BertModel(config).save_pretrained(str(dest), safe_serialization=safe)
    finally:
        hf_logging.enable_progress_bar()
    return dest


@dataclass(frozen=True)
class LocalAssets:
    """Where `ensure_local_assets` put things. Channel folders hold one `*.jsonl` file each."""

    root: Path
    model_dir: Path
    squad_train: Path
    squad_test: Path
    mnli_train: Path
    mnli_test: Path
    imdb_train: Path
    imdb_test: Path

    def channels_for(self, dataset: str) -> tuple[Path, Path]:
        """(train, test) channel folders for a dataset name such as `squad`, `glue`/`mnli`, `imdb`."""
        name = dataset.lower()
        if "squad" in name:
            return self.squad_train, self.squad_test
        if "mnli" in name or "glue" in name:
            return self.mnli_train, self.mnli_test
        if "imdb" in name or "sst" in name:
            return self.imdb_train, self.imdb_test
        raise KeyError(f"no local data for dataset {dataset!r} (have squad, glue/mnli, imdb)")


def _layout(root: Path) -> LocalAssets:
    return LocalAssets(
        root=root,
        model_dir=root / "tiny-bert",
        squad_train=root / "squad" / "train",
        squad_test=root / "squad" / "test",
        mnli_train=root / "mnli" / "train",
        mnli_test=root / "mnli" / "test",
        imdb_train=root / "imdb" / "train",
        imdb_test=root / "imdb" / "test",
    )


def ensure_local_assets(home: Path, *, train_size: int = 2000, test_size: int = 300) -> LocalAssets:
    """Build the tiny model and channel folders once under `home/assets`; later calls reuse them."""

    def build(staging: Path) -> None:
        layout = _layout(staging)
        build_tiny_bert(layout.model_dir)
        write_squad_jsonl(layout.squad_train, train_size, seed=1)
        write_squad_jsonl(layout.squad_test, test_size, seed=2)
        write_mnli_jsonl(layout.mnli_train, train_size, seed=3)
        write_mnli_jsonl(layout.mnli_test, test_size, seed=4)
        write_imdb_jsonl(layout.imdb_train, train_size, seed=5)
        write_imdb_jsonl(layout.imdb_test, test_size, seed=6)

    return _layout(build_once(Path(home) / "assets", ASSETS_VERSION, build, lock_name=".lock"))


def build_once(base: Path, version: str, build: Callable[[Path], None], *, lock_name: str) -> Path:
    """``base/version``, made by ``build`` (into a staging folder) the first time and found after. Safe against
    concurrent callers: a file lock serialises builders, and the finished folder appears by one atomic rename,
    so nobody ever sees half of it. Readable by the sandboxed jobs' uid (``_readable``)."""
    final = base / version
    if (final / "READY").exists():
        _readable(final)
        return final
    with exclusive_lock(base / lock_name):
        if (final / "READY").exists():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=base))
        try:
            build(staging)
            (staging / "READY").write_text(version + "\n")
            _readable(staging)
            if final.exists():  # a stale, incomplete folder from an older crash
                shutil.rmtree(final)
            os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    logger.info("built %s", final)
    return final


def _readable(folder: Path) -> None:
    """Readable by every uid: mkdtemp made the folder 0700 and safetensors writes 0600, and the sandboxed jobs
    that read the set run as another uid (sandbox.py). Only what this user owns is changed; links are left."""
    own = os.geteuid()
    for root, _dirs, files in os.walk(folder):
        for path, wanted in ((root, 0o555), *((os.path.join(root, f), 0o444) for f in files)):
            info = os.lstat(path)
            if info.st_uid == own and not stat.S_ISLNK(info.st_mode) and info.st_mode & wanted != wanted:
                os.chmod(path, stat.S_IMODE(info.st_mode) | wanted)
