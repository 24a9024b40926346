"""The Python environment a local job runs on, and the job's own environment layered on top of it.

A job runs on an *interpreter environment*: today the bot's own venv; with image runtimes (issue 23), a venv
made for the SageMaker training image the plan names. Its files are never the job's to change: inside the
sandbox they are mounted read-only, and whatever the job's ``requirements.txt`` asks for (the training
toolkit runs ``python -m pip install -r requirements.txt``) goes into the job's own environment, a venv in the
job's folder whose ``site-packages`` comes first and which sees the interpreter environment's packages after
its own (a ``.pth`` line). The interpreter environment's console scripts (``train``, ``torchrun``, ``pip``) are
copied into the job's ``bin/`` pointing at the job's Python, so every process of the job, and every ``pip``
it runs, uses the job's environment. Making one costs a few milliseconds: no packages are copied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from jobs.errors import BackendError

#: The file in the job's environment that puts the interpreter environment's packages after its own.
LAYER_PTH = "_trainbot_layer.pth"
_SH_EXEC = b"'''exec' "  # the second line of the long-path launcher: the Python next, quoted or not
_LAUNCHER_BYTES = 8192  # a console script's launcher lines (a #! line, or the long-path /bin/sh form) fit
_SHEBANG_MAX = 120  # Linux reads at most 127 bytes of a #! line (before 5.1): longer paths go through /bin/sh
_PROBE = (
    "import json, site, sys, sysconfig; print(json.dumps({'prefix': sys.prefix, 'base_prefix': sys.base_prefix,"
    " 'base_executable': getattr(sys, '_base_executable', sys.executable), 'version': '%d.%d' % sys.version_info[:2],"
    " 'full_version': '%d.%d.%d' % sys.version_info[:3],"
    " 'site_packages': sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})}))"
)


@dataclass(frozen=True)
class Interpreter:
    """An interpreter environment: what a job's Python is made of (mounted read-only in the sandbox)."""

    python: Path  # its executable as called (a venv's bin/python, not resolved)
    prefix: Path  # sys.prefix: the venv
    base_prefix: Path  # sys.base_prefix: the installation the venv was made from
    base_executable: Path  # the interpreter binary itself
    site_packages: tuple[Path, ...]
    version: str  # "3.11"
    full_version: str  # "3.11.7"

    @classmethod
    def of(cls, python: str | Path) -> Interpreter:
        """The environment of ``python`` (asked once per executable and process)."""
        return _interpreter(str(Path(python).absolute()))

    @classmethod
    def planned(cls, prefix: Path, base: Interpreter) -> Interpreter:
        """A venv at ``prefix`` made from ``base``'s Python, as it will be once built (an image runtime built in
        the job's own first step, prepare.py): no process is asked, the layout is the venv module's."""
        return cls(
            python=prefix / "bin" / "python", prefix=prefix, base_prefix=base.base_prefix,
            base_executable=base.base_executable,
            site_packages=(prefix / "lib" / f"python{base.version}" / "site-packages",),
            version=base.version, full_version=base.full_version,
        )

    def read_only_paths(self) -> tuple[Path, ...]:
        """What the sandbox mounts read-only so this Python runs: the venv, the installation under it, and
        where the binary really lives (both resolved: the sandbox binds real folders)."""
        paths = {self.prefix, self.base_prefix, self.base_executable.parent, *self.site_packages}
        return tuple(sorted({Path(os.path.realpath(p)) for p in paths} | paths))


@lru_cache(maxsize=16)
def _interpreter(python: str) -> Interpreter:
    raw: dict[str, Any]
    if Path(python) == Path(sys.executable).absolute():
        import sysconfig

        raw = {
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
            "base_executable": getattr(sys, "_base_executable", sys.executable),
            "version": "{}.{}".format(*sys.version_info[:2]),
            "full_version": "{}.{}.{}".format(*sys.version_info[:3]),
            "site_packages": sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}),
        }
    else:
        try:
            done = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30, check=True)
            raw = json.loads(done.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            raise BackendError(f"Could not ask {python} where its packages are: {exc}.") from exc
    return Interpreter(
        python=Path(python),
        prefix=Path(raw["prefix"]),
        base_prefix=Path(raw["base_prefix"]),
        base_executable=Path(os.path.realpath(raw["base_executable"])),
        site_packages=tuple(Path(p) for p in raw["site_packages"]),
        version=str(raw["version"]),
        full_version=str(raw["full_version"]),
    )


def layered_environment(interpreter: Interpreter, dest: Path) -> Path:
    """The job's own environment at ``dest`` (a venv whose packages come before ``interpreter``'s);
    returns its ``bin/python``. ``pip install`` run with it installs into ``dest``, never ``interpreter``."""
    bin_dir = dest / "bin"
    site_packages = dest / "lib" / f"python{interpreter.version}" / "site-packages"
    bin_dir.mkdir(parents=True, exist_ok=True)
    site_packages.mkdir(parents=True, exist_ok=True)
    (dest / "pyvenv.cfg").write_text(
        f"home = {interpreter.base_executable.parent}\n"
        "include-system-site-packages = false\n"
        f"version = {interpreter.full_version}\n"
    )
    python = bin_dir / "python"
    for name in ("python", "python3", f"python{interpreter.version}"):
        link = bin_dir / name
        if not link.is_symlink():
            link.symlink_to(interpreter.base_executable)
    # site.addsitedir, not a bare path: the interpreter environment's own .pth files are read too.
    lines = "; ".join(f"site.addsitedir({str(p)!r})" for p in interpreter.site_packages)
    (site_packages / LAYER_PTH).write_text(f"import site; {lines}\n")
    _copy_console_scripts(interpreter, bin_dir, python)
    return python


def _copy_console_scripts(interpreter: Interpreter, bin_dir: Path, python: Path) -> None:
    """Each script in the interpreter environment's bin/ that runs on its Python, pointed at the job's. Paths
    compare resolved: a home may reach its runtimes through a link, and the scripts name the real path."""
    source_bin = interpreter.prefix / "bin"
    if not source_bin.is_dir():
        return
    pythons = {str(source_bin / name) for name in ("python", "python3", f"python{interpreter.version}")}
    pythons |= {str(interpreter.python), str(interpreter.base_executable)}
    real_pythons = {os.path.realpath(p) for p in pythons}
    for entry in os.scandir(source_bin):
        if entry.name.startswith(("python", "activate")) or not entry.is_file(follow_symlinks=False):
            continue
        with open(entry.path, "rb") as handle:
            head = handle.read(_LAUNCHER_BYTES)  # a binary in bin/ (ruff, torch's tools) is never read whole
            runs_on, body_start = _script_python(head.split(b"\n"))
            if runs_on is None or os.path.realpath(runs_on) not in real_pythons:
                continue
            lines = (head + handle.read()).split(b"\n")
        target = bin_dir / entry.name
        target.write_bytes(_shebang(python) + b"\n".join(lines[body_start:]))
        target.chmod(0o755)


def _script_python(lines: list[bytes]) -> tuple[str | None, int]:
    """(the Python a console script runs on, the index of its first line after the launcher) for both forms a
    launcher takes: ``#!PYTHON``, and for a long path ``#!/bin/sh`` with an ``exec "PYTHON"`` line (_shebang)."""
    head = lines[0] if lines else b""
    if not head.startswith(b"#!"):
        return None, 0
    shell = head[2:].strip()
    if shell == b"/bin/sh" and len(lines) > 2 and lines[1].startswith(_SH_EXEC):
        rest = lines[1][len(_SH_EXEC):]  # distlib quotes the path (our own _shebang); pip's wheel installer not
        python = rest.split(b'"')[1] if rest.startswith(b'"') else rest.split(b" ")[0]
        return python.decode(errors="replace"), 3
    return shell.decode(errors="replace"), 1


def _shebang(python: Path) -> bytes:
    if len(str(python)) <= _SHEBANG_MAX:
        return f"#!{python}\n".encode()
    # distlib's form for long paths: /bin/sh runs the same file again with the job's Python.
    return f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\n".encode()
