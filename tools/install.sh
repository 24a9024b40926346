#!/usr/bin/env bash
# Installs trainbot into a virtual environment from a committed lock: the one install path of the README's
# commands, CI (.ci/run and the installed-wheel tests) and the Dockerfile, so CI proves what the image runs.
#
#   tools/install.sh VENV LOCK [PACKAGE]
#     VENV     the virtual environment (made with ${PYTHON:-python3} when it does not exist)
#     LOCK     locks/bot.txt (the image's), locks/local.txt (a terminal bot that trains) or locks/test.txt
#     PACKAGE  .   build this checkout's wheel (into dist/) with the locked setuptools and install it, not
#                  editable
#              -e  this checkout, editable (a developer's venv)
#              FILE.whl  that wheel
#              none: the lock's packages only (the Dockerfile's cached layer)
#
# Exactly the lock is installed: pip in hash-checking mode with --no-deps (a package the lock lacks is not
# pulled in behind it), then `pip check` proves the set is whole. torch comes first and alone when the lock
# says so (locks/torch.txt: the CPU build, which the locks are resolved against).
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n '5,11p' "$0" >&2
  exit 2
fi
venv=$1 lock=$2 package=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$lock" ] || { echo "no lock file $lock" >&2; exit 2; }

[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input --quiet)
# pip warns once a package for each configured extra index that lacks it (file:// mirrors on these machines).
unmirrored() { grep -v "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" || true; }

if grep -q '^# torch: locks/torch.txt' "$lock"; then
  # Alone and by its exact local version: "torch" in the same call could be met by PyPI's CUDA build.
  "${pip[@]}" install --no-deps -r "$root/locks/torch.txt" 2>&1 | unmirrored
fi
"${pip[@]}" install --require-hashes --no-deps -r "$lock" 2>&1 | unmirrored

case "$package" in
  "") ;;
  -e)
    "${pip[@]}" install --no-deps --no-build-isolation -e "$root" 2>&1 | unmirrored
    ;;
  .)
    dist=$root/dist
    mkdir -p "$dist" && rm -f "$dist"/trainbot-*.whl
    # A fresh build folder: setuptools reuses build/lib, and a module deleted since the last build would
    # still ship. No build isolation: the lock's setuptools builds it, not whatever the index has today.
    rm -rf "$root/build"
    "${pip[@]}" wheel --no-deps --no-build-isolation --wheel-dir "$dist" "$root" 2>&1 | unmirrored
    rm -rf "$root/build"
    "${pip[@]}" install --no-deps --force-reinstall "$dist"/trainbot-*.whl 2>&1 | unmirrored
    ;;
  *.whl)
    "${pip[@]}" install --no-deps --force-reinstall "$package" 2>&1 | unmirrored
    ;;
  *)
    echo "PACKAGE is '.', '-e', a .whl file or nothing; got '$package'" >&2
    exit 2
    ;;
esac
"${pip[@]}" check 2>&1 | unmirrored
