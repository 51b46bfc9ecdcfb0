# syntax=docker/dockerfile:1
# The capacity-aware listener, as a drop-in image for ARC's listener: ARC starts the listener
# container with the command /ghalistener, as UID 65532 in ARC's own image.
#   docker build -t <registry>/capacity-listener:<version> .   (releases: .github/workflows)
# tests/integration/test_dockerfile.py runs the builder stage's steps in a fresh directory and
# starts the resulting /ghalistener, so keep the builder stage to ENV, WORKDIR, COPY and RUN.
# tests/image builds this file as it is (base: PYTHON_IMAGE, a Debian stand-in there) and runs
# the image.

ARG PYTHON_IMAGE=python:3.13-slim

# --- builder: a virtualenv with the locked dependencies and the listener -------------------
FROM ${PYTHON_IMAGE} AS builder
ENV VENV=/venv \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock changes.
COPY deploy/install.sh deploy/requirements.lock deploy/
RUN sh deploy/install.sh deps
COPY pyproject.toml README.md ./
COPY listener listener
COPY capacity capacity
COPY base base
RUN sh deploy/install.sh app

# --- runtime: the interpreter, the virtualenv, nothing to build or install with -------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="capacity-listener" \
      org.opencontainers.image.description="Capacity-aware listener for actions-runner-controller scale sets" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1
COPY --from=builder /venv /venv
# /ghalistener is ARC's default listener command. A symlink to the console script keeps the
# start shell-free: the kernel runs the script's own #!/venv/bin/python line. pip is removed
# from the base image's interpreter (PATH now finds the virtualenv's python first, which never
# had pip), and so is the pip wheel ensurepip keeps, which would let pip be reinstalled.
RUN ln -s /venv/bin/ghalistener /ghalistener \
 && /usr/local/bin/python3 -m pip uninstall --yes --quiet --root-user-action=ignore pip \
 && rm -rf /usr/local/lib/python3*/ensurepip/_bundled
USER 65532:65532
ENTRYPOINT ["/ghalistener"]
