"""Write the lock of an image runtime: every package a built runtime holds (its ``pip freeze``, saved by the
build as ``trainbot-freeze.txt``), as ``jobs/planning/data/runtime_locks/<image>.txt``, and name it in the image's
row of ``training_images.json``. A build then installs with the lock as pip constraints, so a rebuild (another
machine, CI, a month later) gets the same transitive versions instead of whatever resolves that day.

    .venv/bin/python tools/lock_runtime.py 4.28.1 [--pytorch 2.0.0] [--home .venv-runtimes]

The runtime must have been built first (ImageRuntimes.ensure, or any test that uses it). The row's runtime key
includes the lock, so the first build after locking is a new folder: the proof that the lock installs.
torch (this machine's CPU build, installed first and pinned by cpu_torch) and pip are left out of the lock.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs.backends.local.runtime import FREEZE_FILE, ImageRuntimes  # noqa: E402
from jobs.planning.images import IMAGES_FILE, LOCKS_DIR, ImagePackages, known_images  # noqa: E402

#: Packages a lock never pins: the CPU torch comes first on its own, pip is the venv's.
UNLOCKED = ("torch", "pip")


def lock_lines(freeze: str) -> list[str]:
    """``name==version`` of every package in ``freeze``, sorted by name, without UNLOCKED or local builds."""
    lines = []
    for raw in freeze.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "==" not in line:
            continue  # an editable or a direct URL is no release the index can give again
        name, _, version = line.partition("==")
        if name.lower().replace("_", "-") in UNLOCKED:
            continue
        lines.append(f"{name}=={version}")
    return sorted(lines, key=str.lower)


def lock_name(image: ImagePackages) -> str:
    return f"transformers{image.transformers}-pt{image.pytorch}-{image.py}.txt"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transformers")
    parser.add_argument("--pytorch", default=None, help="when several images ship that transformers")
    parser.add_argument("--home", type=Path, default=ROOT / ".venv-runtimes")
    args = parser.parse_args(argv)
    rows = [i for i in known_images() if i.transformers == args.transformers
            and (args.pytorch is None or i.pytorch == args.pytorch)]
    if len(rows) != 1:
        print(f"{len(rows)} images match transformers {args.transformers}: name one with --pytorch.", file=sys.stderr)
        return 2
    image = rows[0]
    freeze = ImageRuntimes(args.home).path(image) / FREEZE_FILE
    if not freeze.is_file():
        print(f"{freeze} is not there: build the {image.label()} first.", file=sys.stderr)
        return 2
    name = lock_name(image)
    LOCKS_DIR.mkdir(parents=True, exist_ok=True)
    header = (f"# Every package of the {image.label()} (pip freeze of a build on {image.key}), installed as "
              "constraints.\n# Written by tools/lock_runtime.py; torch and pip are left out (cpu_torch pins torch).\n")
    (LOCKS_DIR / name).write_text(header + "\n".join(lock_lines(freeze.read_text())) + "\n")
    data = json.loads(IMAGES_FILE.read_text(encoding="utf-8"))
    for row in data["images"]:
        if (row["transformers"], row["pytorch"], row["py"]) == (image.transformers, image.pytorch, image.py):
            row["lock"] = name
    IMAGES_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {LOCKS_DIR / name} and named it in {IMAGES_FILE.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
