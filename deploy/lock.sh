#!/bin/sh
# Regenerates deploy/requirements.lock from the dependencies in pyproject.toml: one exact version
# per package and the sha256 of every file published for it, resolved for every platform and
# every Python the project supports (>= 3.11), so the same lock serves the image (Python 3.13)
# and development machines. Existing pins are kept; pass --upgrade (or
# --upgrade-package NAME) to move them. Run from anywhere:  sh deploy/lock.sh [--upgrade]
set -eu
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet "uv==0.13.9"
"$tmp/venv/bin/uv" pip compile pyproject.toml \
    --universal --python-version 3.11 --generate-hashes \
    --annotation-style line --custom-compile-command "sh deploy/lock.sh" \
    --quiet --output-file deploy/requirements.lock "$@"
