#!/bin/sh
# Installs the listener into a new virtualenv at $VENV, in two steps so that a container build
# can cache the dependencies apart from the source:
#   deps  create the virtualenv (without pip) and install deploy/requirements.lock: exact
#         versions, every file checked against its sha256, wheels only (no compiler needed)
#   app   install this project itself, without dependencies, then verify the environment
# The Dockerfile's builder stage runs these steps, and tests/integration/test_dockerfile.py
# runs the same Dockerfile steps in a fresh directory. Run from the directory holding pyproject.toml.
# PYTHON is the interpreter that creates the virtualenv and runs pip (default: python3).
set -eu

: "${VENV:?VENV must name the virtualenv to create}"
PYTHON="${PYTHON:-python3}"

# pip runs from $PYTHON and installs into the target environment, so the image's virtualenv
# never contains pip itself.
vpip() {
    "$PYTHON" -m pip --python "$VENV/bin/python" "$@"
}

case "${1:-}" in
deps)
    "$PYTHON" -m venv --without-pip "$VENV"
    vpip install --require-hashes --only-binary=:all: --requirement deploy/requirements.lock
    ;;
app)
    vpip install --no-deps .
    vpip check
    ;;
*)
    echo "usage: VENV=/path sh deploy/install.sh deps|app" >&2
    exit 2
    ;;
esac
