"""The Python a local job with own code runs on: a virtual environment per training image, with that image's
transformers, datasets, evaluate, accelerate and scikit-learn (``jobs.planning.images``) and this machine's CPU
torch, plus the image's training toolkit (``train``). Built once per image under ``TRAINBOT_HOME/runtimes`` and
reused by every job after; a team's script then runs there unchanged, as it would in the image. Files it has in
common with the bot's environment or another runtime are hard links to theirs (``shared_files``).

A venv holds absolute paths (its scripts' first lines), so it is built where it stays: under a lock, its marker
written last; a folder without the marker (a build that died) is removed and built again. The bot's own scripts
keep running on the bot's interpreter. A job's own ``requirements.txt`` goes on top inside the job's environment,
never into this shared one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.local.offline_assets import LocalAssets, ensure_local_assets
from jobs.backends.local.offline_chat import ChatAssets, ensure_chat_assets
from jobs.backends.local.shared_files import share_identical_files
from jobs.errors import BackendError, BadInput
from jobs.file_lock import exclusive_lock
from jobs.planning.images import ImagePackages, cpu_torch, image_packages, known_listing, toolkit_requirements
from jobs.planning.spec import JobSpec

logger = logging.getLogger(__name__)

READY_FILE = "trainbot-runtime.json"
#: Every package of a built runtime as pip installed it: what tools/lock_runtime.py turns into the image's lock.
FREEZE_FILE = "trainbot-freeze.txt"
BUILD_STEPS = 3
PIP_TIMEOUT_S = 1800  # the first build downloads a few hundred MB
ASSETS_TIMEOUT_S = 600
#: Where the bot's own modules live, for the runtime to build its offline assets with its own transformers.
_SOURCE_ROOT = Path(__file__).resolve().parents[3]

Run = Callable[..., "subprocess.CompletedProcess[str]"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Runtime:
    """A built runtime: its interpreter and what the job's environment adds for it."""

    image: ImagePackages
    python: Path

    @property
    def prefix(self) -> Path:
        return self.python.parent.parent

    def environment(self) -> dict[str, str]:
        """The image's torch loaded checkpoints without ``weights_only``: a 4.x-era Trainer's ``rng_state.pth``
        (numpy arrays) resumes there; torch >= 2.6 here refuses it unless told to behave as before."""
        return {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"} if self.image.loads_without_weights_only else {}


class ImageRuntimes:
    """Builds and finds the runtimes of training images under ``home/runtimes``."""

    def __init__(self, home: Path, *, base_python: str = sys.executable, run: Run = subprocess.run) -> None:
        # Built where they really are: a venv's scripts name its path, and a home may reach them by a link.
        self._root = (Path(home) / "runtimes").resolve()
        self._base_python = base_python
        self._run = run

    def for_spec(self, spec: JobSpec) -> Runtime:
        """The runtime of the image ``spec`` asks for; BadInput (one sentence) when the data file lacks it."""
        return self.ensure(image_for(spec))

    def path(self, image: ImagePackages) -> Path:
        return self._root / image.key

    def is_built(self, image: ImagePackages) -> bool:
        return self._ready(self.path(image), image)

    def ensure(self, image: ImagePackages, progress: Progress | None = None) -> Runtime:
        """The image's runtime, built first if it is not there yet (minutes, once); ``progress`` hears each step."""
        if image.local:
            raise BadInput(no_local_runtime(image))
        folder = self.path(image)
        if not self._ready(folder, image):
            with exclusive_lock(self._root / f"{image.key}.lock"):
                if not self._ready(folder, image):
                    self._build(folder, image, progress or (lambda line: None))
        return Runtime(image, folder / "bin" / "python")

    def assets(self, runtime: Runtime, builder: str = "offline_assets:ensure_local_assets") -> Path:
        """The home of the offline tiny BERT and generated data built with the runtime's own transformers (a tokenizer
        saved by transformers 5 names a class 4.x does not have); once per runtime. ``builder``: the module of
        jobs.backends.local and its ``ensure_*`` function (the chat assets: offline_chat:ensure_chat_assets)."""
        home = runtime.prefix / "trainbot-assets"
        module, _, function = builder.partition(":")
        script = (f"import sys; from pathlib import Path; from jobs.backends.local.{module} import "
                  f"{function}; print({function}(Path(sys.argv[1])).root)")
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", str(Path.home())),
               "PYTHONPATH": str(_SOURCE_ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self._call([str(runtime.python), "-c", script, str(home)], env=env, timeout=ASSETS_TIMEOUT_S,
                   what=f"build the offline model for the {runtime.image.label()}")
        return home

    # ------------------------------------------------------------------ building

    def _ready(self, folder: Path, image: ImagePackages) -> bool:
        try:
            recorded = json.loads((folder / READY_FILE).read_text())
        except (OSError, ValueError):
            return False
        return recorded == _wanted(image) and (folder / "bin" / "python").exists()

    def _build(self, folder: Path, image: ImagePackages, progress: Progress) -> None:
        started = time.monotonic()
        logger.info("building the %s in %s (once; a few minutes)", image.label(), folder)
        shutil.rmtree(folder, ignore_errors=True)  # a build that died half way
        folder.parent.mkdir(parents=True, exist_ok=True)
        what = f"build the {image.label()}"
        step = f"building the {image.label()} (once, a few minutes): step {{}} of {BUILD_STEPS}, {{}}"
        try:
            progress(step.format(1, "a Python environment"))
            self._call([self._base_python, "-m", "venv", str(folder)], timeout=300, what=what)
            pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            # The image's whole set pinned where a lock was made from an earlier build: nothing drifts.
            constraints = self._constraints(folder, image)
            # torch first and pinned: an open range would pull a multi-GB CUDA build.
            progress(step.format(2, f"this machine's CPU {cpu_torch()}"))
            self._call([*pip, cpu_torch()], timeout=PIP_TIMEOUT_S, what=what)
            shared = share_identical_files(folder / "lib", self._peers(folder))  # torch is most of it: at once
            progress(step.format(3, "the image's packages " + ", ".join(f"{n}=={v}" for n, v in image.packages)))
            self._call([*pip, *constraints, *image.requirements(), *toolkit_requirements()], timeout=PIP_TIMEOUT_S,
                       what=what)
            frozen = self._call([str(folder / "bin" / "python"), "-m", "pip", "freeze", "--all",
                                 "--disable-pip-version-check"], timeout=120, what=what)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        (folder / FREEZE_FILE).write_text(frozen)
        shared += share_identical_files(folder / "lib", self._peers(folder))
        (folder / READY_FILE).write_text(json.dumps(_wanted(image)))
        logger.info("built the %s in %.0f s (%.0f MB of it shared with environments already here)", image.label(),
                    time.monotonic() - started, shared / 1e6)

    def _peers(self, folder: Path) -> list[Path]:
        """Where a new runtime's files may already be: the bot's own environment (when it is the base of the
        runtimes), then every runtime built before."""
        own = [Path(sys.prefix) / "lib"] if self._base_python == sys.executable else []
        built = sorted(p / "lib" for p in self._root.iterdir() if p != folder and (p / READY_FILE).is_file())
        return own + built

    @staticmethod
    def _constraints(folder: Path, image: ImagePackages) -> list[str]:
        if not image.lock:
            return []
        path = folder / "trainbot-lock.txt"
        path.write_text("\n".join(line for line in image.lock if not line.startswith(("torch==", "pip==")))
                        + "\n")
        return ["-c", str(path)]

    def _call(self, argv: Sequence[str], *, timeout: float, what: str, env: dict[str, str] | None = None) -> str:
        try:
            done = self._run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, check=False)
        except subprocess.TimeoutExpired:
            raise BackendError(f"Could not {what}: it took longer than {timeout:.0f} s.") from None
        except OSError as exc:
            raise BackendError(f"Could not {what}: {exc}.") from None
        if done.returncode != 0:
            raise BackendError(f"Could not {what}: {_last_error(done.stderr or done.stdout)}")
        return str(done.stdout or "")


def image_of(spec: JobSpec) -> ImagePackages | None:
    return image_packages(spec.transformers_version, spec.pytorch_version, spec.py_version)


def image_for(spec: JobSpec) -> ImagePackages:
    """The image row of ``spec``; BadInput (one sentence) when the table lacks it or it cannot run here."""
    image = image_of(spec)
    if image is None:
        raise BadInput(missing_runtime(spec))
    if image.local:
        raise BadInput(no_local_runtime(image))
    return image


def no_local_runtime(image: ImagePackages) -> str:
    return (f"The local backend cannot build the {image.label()}: {image.local}; run this job on SageMaker, or "
            "choose transformers_version=4.26.0 or newer for a local run.")


def missing_runtime(spec: JobSpec) -> str:
    return (f"The local backend has no runtime for the transformers {spec.transformers_version} / PyTorch "
            f"{spec.pytorch_version} training image: it knows {known_listing()} "
            "(jobs/planning/data/training_images.json); choose one with transformers_version=, or add the image's "
            "packages from its release notes there.")


def ensure_runtime_assets(runtimes: ImageRuntimes, runtime: Runtime) -> LocalAssets:
    """The offline assets of ``runtime`` (built by it once), as the local backend's layout."""
    return ensure_local_assets(runtimes.assets(runtime))


def ensure_runtime_chat_assets(runtimes: ImageRuntimes, runtime: Runtime) -> ChatAssets:
    """The tiny causal LM and generated chats of ``runtime`` (built by its transformers once)."""
    return ensure_chat_assets(runtimes.assets(runtime, "offline_chat:ensure_chat_assets"))


def _wanted(image: ImagePackages) -> list[str]:
    return [cpu_torch(), *image.requirements(), *toolkit_requirements()]


def _last_error(output: str) -> str:
    """pip's (or Python's) own reason: its last ERROR line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip() and not line.startswith("WARNING")]
    errors = [line for line in lines if line.startswith("ERROR")]
    text = (errors or lines or ["no output"])[-1]
    return text.removeprefix("ERROR: ")[:300]
