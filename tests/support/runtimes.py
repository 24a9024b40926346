"""The product's own image runtime (jobs/backends/local/runtime.py) for the tests: transformers 4.28.1 with the
image's datasets, evaluate, accelerate and scikit-learn, built once per test session by ``ImageRuntimes`` (and kept
between sessions in ``.venv-runtimes/``, ignored by git), then shared by every test that needs an image's Python:
the training scripts on transformers 4, the toolkit, and own code on the local backend.

A test's TRAINBOT_HOME gets ``runtimes`` as a link to the kept folder (``link_runtimes``): the venv was built at its
real path, which its scripts name, so it runs from any home. How long the build took (first and cached) is written
to ``.venv-runtimes/build-times.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jobs.backends.local.runtime import ImageRuntimes, Runtime
from jobs.planning.images import ImagePackages, image_packages

ROOT = Path(__file__).resolve().parents[2]
CACHE_HOME = ROOT / ".venv-runtimes"
TIMES_FILE = CACHE_HOME / "build-times.json"
#: The image the tests run own code and the scripts' transformers-4 checks on (the plans' default image).
TEST_IMAGE = ("4.28.1", "2.0.0", "py310")


def test_image() -> ImagePackages:
    image = image_packages(*TEST_IMAGE)
    assert image is not None, "jobs/planning/data/training_images.json lost the 4.28.1 image"
    return image


def build_runtime() -> tuple[Runtime, float, bool]:
    """(the runtime, seconds it took to get it, whether it was built now rather than found)."""
    runtimes = ImageRuntimes(CACHE_HOME)
    image = test_image()
    fresh = not runtimes.is_built(image)
    started = time.monotonic()
    runtime = runtimes.ensure(image)
    seconds = time.monotonic() - started
    times = json.loads(TIMES_FILE.read_text()) if TIMES_FILE.is_file() else {}
    times["first" if fresh else "cached"] = round(seconds, 2)
    TIMES_FILE.write_text(json.dumps(times))
    return runtime, seconds, fresh


@pytest.fixture(scope="session")
def image_runtime() -> Runtime:
    runtime, _, _ = build_runtime()
    return runtime


#: The image the LLM script runs on (TRL and PEFT): the newest, beyond the SDK's tables.
LLM_IMAGE = ("5.3.0", "2.9.0", "py312")


@pytest.fixture(scope="session")
def llm_runtime() -> Runtime:
    """The product's runtime of the newest image (transformers 5.3, TRL, PEFT), built once and kept."""
    image = image_packages(*LLM_IMAGE)
    assert image is not None, "jobs/planning/data/training_images.json lost the 5.3.0 image"
    return ImageRuntimes(CACHE_HOME).ensure(image)


def link_runtimes(home: Path) -> None:
    """Point ``home/runtimes`` at the session's kept runtimes, so a local backend there finds them built."""
    home.mkdir(parents=True, exist_ok=True)
    link = home / "runtimes"
    if not link.exists():
        link.symlink_to(CACHE_HOME / "runtimes", target_is_directory=True)


def ran_on_image_runtime(job_folder: Path, log: str) -> bool:
    """Whether the job ran on its own environment (``env/``) layered on the image runtime: its log names the
    job's Python, and that environment's layer file puts the runtime's packages after its own."""
    layers = list((job_folder / "env").glob("lib/python*/site-packages/_trainbot_layer.pth"))
    runtime = "runtimes/transformers4.28.1-pt2.0.0-py310"
    return f"{job_folder / 'env' / 'bin' / 'python'}" in log and any(runtime in p.read_text() for p in layers)
