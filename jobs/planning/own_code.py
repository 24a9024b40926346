"""A team's own training code: ``code=git+URL[@REF]`` or ``code=s3://BUCKET/KEY.tar.gz`` with ``entry=PATH``.

Pure rules only (no processes, no network): how a ``code=`` value reads, which entry paths are valid, the
operator's allowlist (``TRAINBOT_CODE_SOURCES``), and the estimator arguments own code plans into. Resolving a
git REF to its commit needs git, so it comes in through the ``CommitResolver`` port that the backend layer
implements (``jobs.backends.code_sources``).

The estimator arguments are the article's: ``git_config={'repo': URL, 'branch': REF, 'commit': SHA}``,
``source_dir='./<the entry's folder>'``, ``entry_point='<the entry's name>'``. The commit pins the lineage:
relaunches and reports use it even after the branch moves. An S3 tarball is the SDK's own form:
``source_dir='s3://.../code.tar.gz'`` and ``entry_point`` the path inside it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

from jobs.errors import SpecError
from jobs.planning.hyperparameters import show

GIT_PREFIX = "git+"
#: Where SageMaker syncs checkpoints with ``checkpoint_s3_uri`` and where the model is uploaded from.
CHECKPOINTS_DIR = "/opt/ml/checkpoints"
MODEL_DIR = "/opt/ml/model"
#: The bot's wrapper (in training/) that runs a team's script when checkpoints on the clock are asked for
#: (``checkpoint_minutes=``): it adds the saves to the script's Trainer, then copies the final model.
SPOT_ENTRY = "trainbot_spot_entry.py"
#: What ships beside the team's script then: the entry and what it imports.
SPOT_ENTRY_FILES = (SPOT_ENTRY, "trainbot_checkpoint_folders.py", "trainbot_rank_agreement.py")
#: The environment variable that names the user's script for the wrapper.
USER_ENTRY_ENV = "TRAINBOT_USER_ENTRY"
#: The environment variable that tells the spot entry how often to save (minutes).
CHECKPOINT_MINUTES_ENV = "TRAINBOT_CHECKPOINT_MINUTES"
#: The plan card's one line on resuming a spot job that runs a team's own script.
SPOT_RESUME_NOTE = (
    f"Spot resume: SageMaker restores {CHECKPOINTS_DIR} after an interruption; your script resumes if it saves "
    f"its checkpoints there (e.g. hp.output_dir={CHECKPOINTS_DIR}) and picks up the newest (get_last_checkpoint)."
)
#: A transformers Trainer (or a subclass: Seq2SeqTrainer, SFTTrainer, ...) being built.
_TRAINER_CALL = re.compile(r"(?<![A-Za-z0-9_.])(?:[A-Z][A-Za-z0-9]*)?Trainer\s*\(")
_SAVE_STRATEGY = re.compile(r"save_strategy\s*=\s*[\"']([a-z]+)[\"']")
_SAVE_STEPS = re.compile(r"save_steps\s*=\s*([0-9]{1,9})\b")
_TRAINER_DEFAULT_SAVE_STEPS = 500

_GIT_SCHEMES = ("https://", "ssh://", "file://")
_SCP_LIKE = re.compile(r"[A-Za-z0-9_.-]+@[A-Za-z0-9.-]+:[^/].*")  # git@github.com:org/repo.git
_URL_CHARS = re.compile(r"[A-Za-z0-9_.~:/@+%=-]+", re.ASCII)
_REF = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./+-]{0,199}", re.ASCII)
_SHA = re.compile(r"[0-9a-f]{40}")
#: The toolkit's own rule for ``sagemaker_program`` (sagemaker-training's process.validate_entry_point).
_ENTRY = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_.+/-]{0,254}", re.ASCII)
#: A percent-escape of a separator or of the percent sign itself (a second round of decoding).
_HIDDEN_SEPARATOR = re.compile(r"%(?:2f|5c|25)", re.IGNORECASE)
#: What a repository path may hold once decoded (a space: Azure DevOps project names have them).
_DECODED_PATH = re.compile(r"[A-Za-z0-9_.~:/@+= -]*", re.ASCII)
_S3_TARBALL = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[A-Za-z0-9_.~/+=@-]+\.tar\.gz", re.ASCII)


@dataclass(frozen=True)
class CodeSource:
    """A parsed ``code=`` value: a git repository at a REF, or an S3 tarball."""

    kind: str  # "git" or "s3"
    url: str  # the repository URL without git+ and @REF, or the s3:// tarball
    ref: str | None = None  # branch, tag or commit as typed; None: the repository's default branch

    @property
    def is_git(self) -> bool:
        return self.kind == "git"


class CommitResolver(Protocol):
    """Resolves a git REF to the commit it names now (jobs.backends.code_sources implements it)."""

    def resolve_commit(self, url: str, ref: str | None) -> str:
        """The full 40-hex commit; SpecError (one sentence) when the repository or REF is not there."""
        ...


class EntryReader(Protocol):
    """Reads the entry script of pinned own code (jobs.backends.code_sources implements it)."""

    def read_entry(self, url: str, commit: str | None, entry: str) -> str | None:
        """The script's text at ``commit``; None when it cannot be read now (it is then not inspected)."""
        ...

    def has_checkout(self, url: str, commit: str) -> bool:
        """Whether ``commit`` is already here, so reading its entry asks no git host."""
        ...


# ---------------------------------------------------------------- reading code= and entry=


def parse_code(value: str) -> CodeSource:
    """``git+URL[@REF]`` or ``s3://BUCKET/KEY.tar.gz``; SpecError naming what is valid otherwise."""
    text = value.strip()
    if text.startswith("s3://"):
        if not _S3_TARBALL.fullmatch(text) or "/../" in text or "/./" in text:
            raise SpecError(f"code={show(text)} is not an S3 tarball: use code=s3://BUCKET/KEY.tar.gz.")
        return CodeSource("s3", text)
    if not text.startswith(GIT_PREFIX):
        raise SpecError(
            f"code={show(text)} is not a code source: use code=git+https://HOST/REPO.git@REF "
            "(or git+ssh://, git+file://) or code=s3://BUCKET/KEY.tar.gz."
        )
    url, ref = _split_ref(text.removeprefix(GIT_PREFIX))
    _check_git_url(url, text)
    if ref is not None and (not _REF.fullmatch(ref) or ".." in ref or ref.endswith((".", "/", ".lock"))):
        raise SpecError(f"code={show(text)}: {show(ref)} is not a branch, tag or commit name.")
    return CodeSource("git", url, ref)


def _split_ref(rest: str) -> tuple[str, str | None]:
    """The REF is what follows the last ``@`` of the path (``git@host:`` and ``user@host`` stay in the URL)."""
    if "://" in rest:
        scheme, _, after = rest.partition("://")
        host, slash, path = after.partition("/")
        if "@" in path:
            path, _, ref = path.rpartition("@")
            return f"{scheme}://{host}{slash}{path}", ref
        return rest, None
    host, colon, path = rest.partition(":")
    if colon and "@" in path:
        path, _, ref = path.rpartition("@")
        return f"{host}:{path}", ref
    return rest, None


def _check_git_url(url: str, typed: str) -> None:
    if not _URL_CHARS.fullmatch(url) or not (url.startswith(_GIT_SCHEMES) or _SCP_LIKE.fullmatch(url)):
        raise SpecError(
            f"code={show(typed)} is not a git URL git can fetch: use git+https://HOST/REPO.git, "
            "git+ssh://git@HOST/REPO.git, git+git@HOST:ORG/REPO.git or git+file:///PATH/TO/REPO."
        )
    parts = urlsplit(url) if "://" in url else None
    if parts is not None and parts.password:
        raise SpecError(
            "A code= URL must not carry a password or token: give the bot's git a credential helper or a "
            "deploy key, and write the URL without it."
        )
    host, path = _host_and_path(url)
    if "%" in host:
        raise SpecError(f"code={show(typed)}: write the host without percent-escapes.")
    _check_repository_path(path, typed)


def _host_and_path(url: str) -> tuple[str, str]:
    """``scheme://[user@]host[:port]`` (or ``user@host``) and the path git asks that host for."""
    if "://" in url:
        scheme, _, rest = url.partition("://")
        netloc, slash, path = rest.partition("/")
        return f"{scheme}://{netloc}", slash + path
    host, _, path = url.partition(":")
    return host, path


def _check_repository_path(path: str, typed: str) -> None:
    """The path as git (or a proxy in front of the host) reads it, percent-escapes decoded: no ``.``/``..``
    segments, no separator or percent sign hidden in an escape, no other escaped character but a space."""
    if _HIDDEN_SEPARATOR.search(path):
        raise SpecError(
            f"code={show(typed)}: a repository path may not hide a / \\ or % in a percent-escape (%2f, %5c, %25)."
        )
    decoded = unquote(path, errors="replace") if "%" in path else path
    if not _DECODED_PATH.fullmatch(decoded):
        raise SpecError(
            f"code={show(typed)}: a repository path may hold letters, digits, spaces and _ . ~ / @ + = - once "
            "its percent-escapes are decoded."
        )
    segments = decoded.split("/")
    if any(segment in ("..", ".") for segment in segments) or "" in segments[1:-1]:
        raise SpecError(
            f"code={show(typed)}: a repository path may not contain . or .. segments or empty ones "
            "(percent-escaped ones included, such as %2e%2e)."
        )


def normalised_source(url: str) -> str:
    """What git will fetch, as one comparable string: scheme and host in lower case, the path with its
    percent-escapes decoded (``https://GitHub.com/%74eam/x`` -> ``https://github.com/team/x``). Prefixes
    of TRAINBOT_CODE_SOURCES are read the same way, so each is compared with what it really allows."""
    if "://" in url:
        scheme, _, rest = url.partition("://")
        netloc, slash, path = rest.partition("/")
        user, at, hostname = netloc.rpartition("@")
        return f"{scheme.lower()}://{user}{at}{hostname.lower()}{slash}{unquote(path)}"
    host, colon, path = url.partition(":")  # git@host:org/repo.git
    user, at, hostname = host.rpartition("@")
    return f"{user}{at}{hostname.lower()}{colon}{unquote(path)}"


def check_entry(entry: str) -> str:
    """``PATH/IN/REPO/script.py``: relative, no ``.``/``..`` segments, the characters SageMaker's toolkit runs."""
    segments = entry.split("/")
    if not _ENTRY.fullmatch(entry) or any(s in ("", ".", "..") for s in segments) or not entry.endswith(".py"):
        raise SpecError(
            f"entry={show(entry)} is not a script path in the code: use a relative path to a .py file, "
            "e.g. entry=examples/pytorch/question-answering/run_qa.py (letters, digits, . _ + - and /)."
        )
    return entry


def check_allowed(code: str, allowed_prefixes: Iterable[str]) -> None:
    """SpecError unless ``code`` starts with one of the operator's TRAINBOT_CODE_SOURCES prefixes."""
    prefixes = [p.strip() for p in allowed_prefixes if p.strip()]
    if not prefixes:
        raise SpecError(
            "Own code (code=) is not enabled on this bot: an operator allows it with TRAINBOT_CODE_SOURCES, "
            "comma-separated URL prefixes such as https://github.com/your-org/,s3://your-bucket/code/."
        )
    source = parse_code(code)
    url = source.url
    fetched = normalised_source(url)
    if not any(_has_prefix(fetched, normalised_source(prefix.removeprefix(GIT_PREFIX))) for prefix in prefixes):
        raise SpecError(
            f"code={show(url, 80)} is not among the sources this bot may run (TRAINBOT_CODE_SOURCES: "
            f"{', '.join(prefixes)}): use one of those, or ask an operator to add it."
        )


def _has_prefix(url: str, prefix: str) -> bool:
    """A prefix ends at a path boundary: ``https://host/org`` allows ``https://host/org/x``, not ``org-evil``."""
    if not url.startswith(prefix):
        return False
    rest = url[len(prefix):]
    return not rest or prefix.endswith(("/", ":")) or rest.startswith("/") or rest == ".git"


# ---------------------------------------------------------------- what the script saves by itself


def script_saving(source: str) -> tuple[bool, str]:
    """(whether the script builds a Trainer, what it saves by itself in words), read from its source."""
    if not _TRAINER_CALL.search(source):
        own = "its own torch.save checkpoints" if "torch.save(" in source or ".save_pretrained(" in source else \
            "no checkpoints trainbot can see"
        return False, own
    strategy = _SAVE_STRATEGY.search(source)
    steps = _SAVE_STEPS.search(source)
    if strategy is not None and strategy.group(1) == "no":
        return True, 'no checkpoints of its own (save_strategy="no")'
    if strategy is not None and strategy.group(1) == "epoch":
        return True, 'a checkpoint each epoch (save_strategy="epoch")'
    if steps is not None:
        return True, f"a checkpoint every {steps.group(1)} steps (save_steps={steps.group(1)})"
    if "save_strategy" in source or "save_steps" in source:
        return True, "the checkpoints its TrainingArguments ask for"
    return True, f"a checkpoint every {_TRAINER_DEFAULT_SAVE_STEPS} steps (the Trainer's default)"


def check_own_checkpoint_minutes(trainer: bool | None, saves: str | None) -> None:
    """``checkpoint_minutes=`` with own code works where the entry's callback can act: a script that builds a
    transformers Trainer (spot or not). Anywhere else it would be accepted and never acted on: refused."""
    if trainer is False:
        raise SpecError(
            "checkpoint_minutes= needs a script that builds a transformers Trainer, which trainbot adds the saves "
            f"on the clock to; this entry builds none and keeps {saves or 'its own saves'}: drop checkpoint_minutes= "
            "and save checkpoints in the script."
        )


def checkpoint_words(*, spot: bool, minutes: float | None, trainer: bool | None, saves: str | None) -> str:
    """The card's checkpoint line for own code: what saves it, so what an interruption can cost. ``minutes``:
    checkpoint_minutes= as typed (None: the script's own saves only)."""
    own = saves or "what your script saves by itself"
    if minutes is None:
        kept = f"; SageMaker keeps {CHECKPOINTS_DIR} across interruptions" if spot else ""
        return f"Checkpoints: your script's own: {own}{kept}."
    every = f"{minutes:g} min" if minutes >= 1 else f"{minutes * 60:g} s"
    where = (f"into the Trainer's output_dir (kept by SageMaker when that is {CHECKPOINTS_DIR}, e.g. "
             f"hp.output_dir={CHECKPOINTS_DIR})")
    if trainer is None:
        return (f"Checkpoints: trainbot's entry adds a save every {every} to your script's Trainer, {where}; a "
                f"script without one keeps only {own}.")
    return (f"Checkpoints: every {every}, a save trainbot's entry adds to your script's Trainer, {where} (the "
            f"script itself keeps {own}): an interruption costs at most {every} of training.")


# ---------------------------------------------------------------- what it plans into


def display(url: str, commit: str | None, ref: str | None = None) -> str:
    """``repo@<short sha>`` as the card and reports show it (``repo@v1.2 (abc1234)`` with a named REF)."""
    repo = url.removesuffix(".git").rstrip("/")
    if commit is None:
        return repo if ref is None else f"{repo}@{ref}"
    short = commit[:7]
    return f"{repo}@{short}" if ref is None or ref == commit else f"{repo}@{short} ({ref})"


def source_arguments(code: str, entry: str, commit: str | None) -> dict[str, object]:
    """The estimator's ``git_config``/``source_dir``/``entry_point`` for own code (the article's form)."""
    source = parse_code(code)
    if not source.is_git:
        return {"source_dir": source.url, "entry_point": entry}
    folder, name = posixpath.split(entry)
    git_config: dict[str, str] = {"repo": source.url}
    if source.ref is not None and not _SHA.fullmatch(source.ref):
        git_config["branch"] = source.ref  # a branch or a tag, as the SDK names both
    if commit is not None:
        git_config["commit"] = commit
    return {"git_config": git_config, "source_dir": f"./{folder}" if folder else ".", "entry_point": name}


def is_full_commit(value: str) -> bool:
    return bool(_SHA.fullmatch(value))


def unpinned_git(code: str | None, commit: str | None) -> CodeSource | None:
    """The git source whose REF a plan must still ask its host about (``git ls-remote``); None when planning
    needs no network: no own code, an S3 tarball, a commit already pinned, or a full commit typed as the REF."""
    if code is None or commit is not None:
        return None
    source = parse_code(code)
    if not source.is_git or (source.ref is not None and is_full_commit(source.ref)):
        return None
    return source
