"""The job's own Python environment (jobs/backends/local/interpreter.py) carries the interpreter environment's
console scripts (the toolkit's ``train``, ``pip``), pointed at the job's Python, also when the job reaches
that environment through a link (a home whose ``runtimes`` links to a shared folder, the scripts naming the
real path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobs.backends.local.interpreter import Interpreter, layered_environment


def _linked_venv(tmp_path: Path) -> Path:
    """This test session's own venv, reached through a link; its ``bin/python`` as the link names it."""
    link = tmp_path / "runtimes"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    return link / "bin" / "python"


def test_console_scripts_are_copied_when_the_environment_is_reached_through_a_link(tmp_path: Path) -> None:
    linked_python = _linked_venv(tmp_path)
    job_python = layered_environment(Interpreter.of(linked_python), tmp_path / "job-env")
    pip = job_python.parent / "pip"
    assert pip.is_file(), sorted(p.name for p in job_python.parent.iterdir())
    assert pip.read_bytes().startswith(f"#!{job_python}\n".encode())  # the job's Python, not the runtime's
    ran = subprocess.run([str(pip), "--version"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr


def test_a_long_job_path_gets_the_shell_launcher_and_still_runs(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6, "job-env")
    job_python = layered_environment(Interpreter.of(_linked_venv(tmp_path)), deep)
    pip = job_python.parent / "pip"
    assert pip.read_bytes().startswith(b"#!/bin/sh\n")
    ran = subprocess.run([str(pip), "--version"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert f'exec\' "{job_python}"'.encode() in pip.read_bytes()  # on the job's Python, not the runtime's


def test_a_runtime_built_at_a_long_path_gives_the_job_its_console_scripts(tmp_path: Path) -> None:
    """pip writes a long path's launcher unquoted (``'''exec' /path/python "$0" "$@"``): the job still gets the
    runtime's ``train`` (a 5.3 runtime built below a test's home once lost it, and the job could not start)."""
    runtime = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6, "runtime")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(runtime)], check=True, timeout=120)
    python = runtime / "bin" / "python"
    train = runtime / "bin" / "train"
    train.write_text(f"#!/bin/sh\n'''exec' {python} \"$0\" \"$@\"\n' '''\nimport sys\nprint('trained on', sys.prefix)\n")
    train.chmod(0o755)
    job_python = layered_environment(Interpreter.of(python), tmp_path / "job-env")
    ran = subprocess.run([str(job_python.parent / "train")], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"trained on {tmp_path / 'job-env'}"
