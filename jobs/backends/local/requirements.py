"""A job's ``requirements.txt``, installed in its own step before the job (prepare.py), reaching the package
index and nothing else.

What is enforced, and how:
- **Only the configured index.** Each line is read before pip runs: a requirement with a URL, a VCS or a local
  path, and pip options that name other sources (``-i``, ``--index-url``, ``--extra-index-url``, ``-f``,
  ``--find-links``, ``--trusted-host``, ``-e``, nested ``-r``/``-c``) are refused with one sentence. pip runs
  ``--isolated`` (no configuration file or PIP_* variable of the job can redirect it) and is given the index
  this machine's pip is configured with, and nothing else.
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

import re
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


def check_lines(text: str) -> list[str]:
    """The requirement lines of ``text``; BadInput (one sentence) for a line that names another source."""
    kept: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
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
    lines = check_lines(requirements.read_text(errors="replace"))
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
