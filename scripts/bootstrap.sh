#!/usr/bin/env bash
# Create .venv (if missing) and install pytest-devmem with its test extras (JAX, TensorFlow-CPU,
# nvidia-ml-py, hypothesis, pytest-xdist, pandas; build, setuptools and twine for the package check),
# the deviceless GPU and TPU compilers (gpu-compile,
# tpu-compile), and the docs extra (MkDocs with Material, for `mkdocs build --strict`). Safe to run
# again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,fast-model,gpu-compile,tpu-compile,docs]'
