"""The environment a local job or a local endpoint gets: built from an allowlist, never the bot's own.

The bot's process holds the Slack tokens, the signing secret, AWS keys and TRAINBOT_* settings; a training
script or a model server is other people's code and data, so it gets only what it needs to run: where
programs and home are, the locale, the Hugging Face cache and offline switches, thread and BLAS knobs,
plus what the backend itself sets (the SM_* variables, the job's hyperparameters). Nothing else passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: Variables copied from the bot's environment when set (exact names).
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        # The source of the bot's own modules (an endpoint server is `python -m jobs.backends...`).
        "PYTHONPATH",
        # The Hugging Face cache and its offline switches; never HF_TOKEN (a credential of the bot's).
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "TRANSFORMERS_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TOKENIZERS_PARALLELISM",
        # Some processors need these for a correct OpenBLAS (see the machine notes); threads.
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "MPLBACKEND",
    }
)
#: Prefixes copied when set: the locale categories.
ALLOWED_PREFIXES = ("LC_",)


def base_environment(python: str, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of `source` (default: this process's environment), with the directory of
    `python` first on PATH so its console scripts (`train`, `torchrun`) are the ones found."""
    source = os.environ if source is None else source
    env = {
        name: value
        for name, value in source.items()
        if name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)
    }
    bin_dir = str(Path(python).parent)
    path = env.get("PATH") or os.defpath
    if bin_dir not in path.split(os.pathsep):
        path = os.pathsep.join((bin_dir, path))
    env["PATH"] = path
    env.setdefault("HOME", str(Path.home()))
    env.setdefault("LANG", "C.UTF-8")
    return env
