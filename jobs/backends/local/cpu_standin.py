"""What a team's script asks of the image's GPUs, read by the CPU stand-in through the job's environment, never
by editing the script.

A script written for the training image asks torch.distributed for NCCL (``init_process_group("nccl")``, or
transformers' Trainer under torchrun does), which a CPU build of torch does not have ("Distributed package doesn't
have NCCL built in"). The job's own Python environment (interpreter.layered_environment) gets one ``.pth`` line
that imports a small module at start-up; with ``TRAINBOT_CPU_STANDIN=1`` in the job's environment it:

- reads NCCL as gloo wherever torch.distributed is asked for a backend (init_process_group, new_group), so a
  plain DDP script runs over gloo;
- makes a transformers ``TrainingArguments`` built without a GPU one for the CPU (``no_cuda``/``use_cpu``, and
  gloo for 4.x's CPU backend), before its own checks run, as the bot's own scripts ask for themselves.

Everything else of the script runs as written; the plan card lists these changes. The module is standard library
only, and any failure of the hook leaves the job as it would have been without it.
"""

from __future__ import annotations

from pathlib import Path

#: Set in a job's environment to turn the stand-in on.
STANDIN_ENV = "TRAINBOT_CPU_STANDIN"
MODULE = "_trainbot_cpu_standin"
PTH = "_trainbot_cpu_standin.pth"

HOOK_SOURCE = '''\
"""trainbot's CPU stand-in for a local job (jobs/backends/local/cpu_standin.py): NCCL read as gloo, and a
TrainingArguments without a GPU made one for the CPU. Acts only with TRAINBOT_CPU_STANDIN=1."""
import importlib.abc
import importlib.util
import os
import sys


def _gloo(backend):
    if isinstance(backend, str) and "nccl" in backend.lower():
        return "gloo"
    return backend


def _wrap_backend(function):
    def wrapper(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _gloo(kwargs["backend"])
        elif args:
            args = (_gloo(args[0]),) + tuple(args[1:])
        return function(*args, **kwargs)
    wrapper.__wrapped__ = function
    wrapper._trainbot_standin = True
    return wrapper


def _ours(function):
    # Our own mark, not __wrapped__: torch's own decorators (functools.wraps) set that one.
    return getattr(function, "_trainbot_standin", False)


def _patch_c10d(module):
    for name in ("init_process_group", "new_group"):
        original = getattr(module, name, None)
        if original is None or _ours(original):
            continue
        if name == "new_group":
            def new_group(*args, _original=original, **kwargs):
                if "backend" in kwargs:
                    kwargs["backend"] = _gloo(kwargs["backend"])
                elif len(args) >= 3:
                    args = tuple(args[:2]) + (_gloo(args[2]),) + tuple(args[3:])
                return _original(*args, **kwargs)
            new_group.__wrapped__ = original
            new_group._trainbot_standin = True
            setattr(module, name, new_group)
        else:
            setattr(module, name, _wrap_backend(original))


def _patch_training_arguments(module):
    cls = getattr(module, "TrainingArguments", None)
    original = getattr(cls, "__post_init__", None)
    if cls is None or original is None or _ours(original):
        return

    def post_init(self, *args, **kwargs):
        try:
            import torch
            if not torch.cuda.is_available():
                for name in ("no_cuda", "use_cpu"):
                    if hasattr(self, name):
                        setattr(self, name, True)
                if hasattr(self, "xpu_backend") and not getattr(self, "xpu_backend", None):
                    self.xpu_backend = "gloo"
                if hasattr(self, "ddp_backend") and _gloo(getattr(self, "ddp_backend", None)) == "gloo":
                    self.ddp_backend = "gloo"
        except Exception:
            pass
        return original(self, *args, **kwargs)

    post_init.__wrapped__ = original
    post_init._trainbot_standin = True
    cls.__post_init__ = post_init


_PATCHES = {
    "torch.distributed.distributed_c10d": _patch_c10d,
    "transformers.training_args": _patch_training_arguments,
}


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception:
            pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, patch)
        return spec


if os.environ.get("TRAINBOT_CPU_STANDIN") == "1" and not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
'''


def install(site_packages: Path) -> None:
    """The hook in a job's own environment (its site-packages): loaded at every start of its Python."""
    site_packages.mkdir(parents=True, exist_ok=True)
    (site_packages / f"{MODULE}.py").write_text(HOOK_SOURCE)
    (site_packages / PTH).write_text(f"import {MODULE}\n")
