"""What a local job with own code does before it trains, in the job's own process (as SageMaker downloads the
image and the toolkit installs ``requirements.txt`` before the script starts): the image runtime built if it is
not there yet (runtime.py; minutes, once), the job's own environment layered on it with the CPU stand-in, and the
script's ``requirements.txt`` installed in a step of its own. Then it becomes the job (``exec``), which trains
offline in its sandbox.

Run as ``python -m jobs.backends.local.prepare PLAN.json`` under the job's wrapper, with the bot's environment
(the build reads this machine's pip configuration, as the bot's own install does). Each step prints a
``[setup]`` line the local backend shows as the job's ``Downloading`` status, so the card says how far the build
is; a step that fails prints ``[setup] failed: <one sentence>`` and exits 2, and that sentence is the job's
failure reason.

The ``requirements.txt`` step (requirements.py) reaches the package index and nothing else: pip alone runs, told
only the configured index, wheels only (no package's own code runs while the network is open), with an
environment of no credentials and HOME in the job's scratch folder, inside a bubblewrap sandbox that sees only
the job's environment (writable), the runtime and the system (read-only): no bot home, no other job.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from jobs.backends.local import cpu_standin
from jobs.backends.local.interpreter import Interpreter, layered_environment
from jobs.backends.local.requirements import install_requirements
from jobs.backends.local.runtime import ImageRuntimes
from jobs.backends.local.sandbox import hand_over_tree
from jobs.errors import BadInput, TrainbotError
from jobs.planning.images import known_images

SETUP = "[setup]"
FAILED = f"{SETUP} failed: "


def say(line: str) -> None:
    print(f"{SETUP} {line}", flush=True)


def prepare(plan: dict[str, Any]) -> list[str]:
    """The steps before the job; returns the job's command (argv)."""
    image = next((i for i in known_images() if i.key == plan["image"]), None)
    if image is None:  # the data file changed between the launch and this step
        raise BadInput(f"The image runtime {plan['image']} is no longer in jobs/planning/data/training_images.json: "
                       "launch the job again.")
    runtimes = ImageRuntimes(Path(plan["home"]), base_python=plan["base_python"])
    if not runtimes.is_built(image):
        say(f"the {image.label()} is not built yet")
    runtime = runtimes.ensure(image, progress=say)
    env_dir = Path(plan["env_dir"])
    interpreter = Interpreter.of(runtime.python)
    python = layered_environment(interpreter, env_dir)
    cpu_standin.install(env_dir / "lib" / f"python{interpreter.version}" / "site-packages")
    if plan.get("owner") is not None:  # the job's uid installs requirements.txt into it, and may write it after
        hand_over_tree(env_dir, int(plan["owner"]))
    requirements = plan.get("requirements")
    if requirements:
        say("installing requirements.txt from the package index (its own step, before the job)")
        install_requirements(Path(requirements), python, plan["install"])
        say("requirements.txt installed")
    say("starting the job")
    return list(plan["command"])


def main(argv: list[str]) -> int:
    plan_file = Path(argv[1])
    plan = json.loads(plan_file.read_text())
    plan_file.unlink()  # the job's folder is the job's to read: the index settings in the plan are not
    try:
        command = prepare(plan)
    except TrainbotError as exc:
        print(f"{FAILED}{exc.user_message()}", flush=True)
        return 2
    # The sandbox's command is a bare name (bwrap): found on this step's PATH, as the runner's spawn would.
    program = shutil.which(command[0]) or command[0]
    os.execve(program, command, dict(plan["job_env"]))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
