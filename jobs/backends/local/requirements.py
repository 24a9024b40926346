"""A job's ``requirements.txt``, installed in its own step before the job (prepare.py), reaching the package
index and nothing else.

What is enforced, and how:
- **Only the configured index, and the code's own wheels.** Each line is read before pip runs: a requirement
  with a URL, a VCS or a path outside the code, and pip options that name other sources (``-i``, ``--index-url``, ``--extra-index-url``, ``-f``,
  ``--find-links``, ``--trusted-host``, ``-e``, nested ``-r``/``-c``) are refused with one sentence. pip runs
  ``--isolated`` (no configuration file or PIP_* variable of the job can redirect it) and is given the index
  this machine's pip is configured with, and nothing else. A line naming a ``.whl`` file inside the job's own
  code (``./wheels/pkg-1.0-py3-none-any.whl``, as teams ship a private package beside their script) is the code's,
  not another source: the launch copies it into the job's folder (``stage``), read-only to the step.
- **No package code while the network is open.** ``--only-binary=:all:``: wheels are unpacked, never built, so
  pip is the only program that runs in this step; a requirement with no wheel is refused with a sentence naming
  it. (SageMaker's toolkit would build it from source; that is the one thing this step does not do.)
- **No secrets, no bot home.** The environment is an allowlist with HOME and the cache in the job's scratch
  folder; inside bubblewrap (when the sandbox is on) the step sees the system, the runtime (read-only) and the
  job's own environment (writable), nothing of TRAINBOT_HOME. It has the host's network, as pip needs: other
  hosts are not blocked at the network level, only never asked for.

Then the job itself trains offline in its sandbox; the toolkit's own ``pip install -r requirements.txt`` there
finds everything installed already.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from jobs.backends.local.environment import base_environment
from jobs.errors import BadInput

INSTALL_TIMEOUT_S = 900
#: pip options a requirements file may carry that keep to the configured index.
_HARMLESS_OPTIONS = ("--prefer-binary", "--only-binary", "--no-binary", "--pre", "--require-hashes", "--hash")
_OTHER_SOURCES = re.compile(r"(?:^|\s)(?:-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host|-e|"
                            r"--editable|-r|--requirement|-c|--constraint)(?:\s|=|$)")
_URL = re.compile(r"(?:://|^git\+|^hg\+|^svn\+|^bzr\+|@\s*(?:file|https?|git)\b|^[./~])", re.IGNORECASE)
_NO_WHEEL = re.compile(r"No matching distribution found for (\S+)")
_CONFLICT = re.compile(r"(?:Cannot install|conflicting dependencies|ResolutionImpossible)")


def check_lines(text: str, wheels: Path | None = None) -> list[str]:
    """The requirement lines of ``text``; BadInput (one sentence) for a line that names another source. A wheel
    file is accepted only inside ``wheels`` (the copies ``stage`` made in the job's folder)."""
    kept: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if wheels is not None and _is_wheel_path(line):
            if _inside(Path(line), wheels) and Path(line).is_file() and not Path(line).is_symlink():
                kept.append(line)
                continue
            raise BadInput(_outside_code(number, line))
        if line.startswith("-"):
            if _OTHER_SOURCES.search(line) or not line.startswith(_HARMLESS_OPTIONS):
                raise BadInput(f"requirements.txt line {number} ({line[:80]!r}) names another package source or "
                               "option: a local job installs only from the configured package index; write "
                               "name==version lines.")
            continue
        if _URL.search(line):
            raise BadInput(f"requirements.txt line {number} ({line[:80]!r}) installs from a URL, a repository or "
                           "a path: a local job installs only from the configured package index; name a release "
                           "on it (name==version).")
        kept.append(line)
    return kept


def stage(requirements: Path, code: Path, dest: Path) -> Path:
    """``requirements`` (a file of the job's code folder ``code``) as the step installs it, written in ``dest``
    (the job's folder): each line naming a wheel of the code (a relative path to a regular ``.whl`` file inside
    ``code``) rewritten to a copy in ``dest/wheels``; every other line as it was. BadInput (one sentence) for a
    wheel outside the code, a link, a path that is no wheel, or a line check_lines refuses."""
    wheels = dest / "wheels"
    lines: list[str] = []
    for number, raw in enumerate(requirements.read_text(errors="replace").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if _is_wheel_path(line):
            found = code / line
            if line.startswith(("/", "~")) or not _inside(found, code) or found.is_symlink() or not found.is_file():
                raise BadInput(_outside_code(number, line))
            wheels.mkdir(parents=True, exist_ok=True)
            copy = wheels / found.name
            shutil.copyfile(found, copy)
            lines.append(str(copy))
        else:
            lines.append(raw)
    staged = dest / "requirements.txt"
    staged.write_text("\n".join(lines) + "\n")
    check_lines(staged.read_text(), wheels=wheels)  # refused at launch, before anything runs (the step checks again)
    return staged


def _is_wheel_path(line: str) -> bool:
    return line.lower().endswith(".whl") and "://" not in line and "@" not in line and not line.startswith("-")


def _inside(path: Path, folder: Path) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real != root and real.startswith(root + os.sep)


def _outside_code(number: int, line: str) -> str:
    return (f"requirements.txt line {number} ({line[:80]!r}) names a wheel outside the job's code, a link or no "
            "file: a local job installs from the configured package index, or a .whl file inside its own code "
            "folder named by a relative path (./wheels/pkg-1.0-py3-none-any.whl).")


def index_options(python: Path) -> list[str]:
    """The package index this machine's pip is configured with (its configuration files and PIP_* variables,
    as ``pip config list`` reads them), as explicit options for an ``--isolated`` pip."""
    done = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True,
                          timeout=60, check=False)
    options: list[str] = []
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        value = value.strip().strip("'\"")
        flag = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
                "cert": "--cert", "timeout": "--timeout", "default-timeout": "--timeout"}.get(name)
        if flag and value:
            for part in value.split():
                if [flag, part] != options[-2:] and not _seen(options, flag, part):
                    options += [flag, part]
    return options


def _seen(options: list[str], flag: str, value: str) -> bool:
    return any(options[i] == flag and options[i + 1] == value for i in range(0, len(options) - 1, 2))


def install_requirements(requirements: Path, python: Path, install: dict[str, Any]) -> None:
    """``requirements`` into the environment of ``python`` (the job's own), as the module docstring says;
    BadInput naming the requirement and the cause when pip cannot."""
    lines = check_lines(requirements.read_text(errors="replace"), wheels=requirements.parent / "wheels")
    if not lines:
        return
    clean = requirements.with_name("requirements.checked.txt")
    clean.write_text("\n".join(lines) + "\n")
    argv = [str(python), "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "--no-input",
            "--only-binary=:all:", *install.get("index", []), "-r", str(clean)]
    scratch = Path(install["scratch"])
    env = base_environment(str(python), source={})
    env.update(HOME=str(scratch), PIP_CACHE_DIR=str(scratch / "pip-cache"), TMPDIR=str(scratch / "tmp"))
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    sandbox = install.get("sandbox") or []
    try:
        done = subprocess.run([*sandbox, *(["--"] if sandbox else []), *argv], capture_output=True, text=True,
                              env=env, timeout=INSTALL_TIMEOUT_S, check=False, cwd=str(scratch))
    except subprocess.TimeoutExpired:
        raise BadInput(f"requirements.txt did not install within {INSTALL_TIMEOUT_S} s from the package index.") from None
    if done.returncode != 0:
        raise BadInput(install_failure(done.stderr + done.stdout, lines))


def install_failure(output: str, lines: list[str]) -> str:
    """pip's failure as one sentence naming the requirement and the cause."""
    missing = _NO_WHEEL.search(output)
    if missing:
        name = missing.group(1)
        return (f"requirements.txt could not be installed: {name} has no wheel on the package index for this "
                "machine's Python (a local job installs wheels only, so no package code runs while the network is "
                "open, and reaches only the configured index); pin a version that has one, or run on SageMaker.")
    if _CONFLICT.search(output):
        return (f"requirements.txt could not be installed: its pins ({', '.join(lines)[:200]}) conflict with each "
                "other or with the image's packages.")
    last = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")] or ["no reason given"]
    return f"requirements.txt could not be installed: {last[-1].removeprefix('ERROR: ')[:300]}."
