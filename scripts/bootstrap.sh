#!/usr/bin/env bash
# Create .venv (if missing) and install pytest-devmem with its test extras (JAX, TensorFlow-CPU,
# nvidia-ml-py, hypothesis, pytest-xdist, pandas; build, setuptools and twine for the package check),
# and the docs extra (MkDocs with Material, for `mkdocs build --strict`); then the
# deviceless GPU and TPU compilers matched to the JAX installed there (`devmem compilers install`: into
# ~/.cache/pytest-devmem/compilers/jaxlib-VERSION-pyX.Y-MACHINE, or $DEVMEM_COMPILERS), outside .venv,
# so that `import jax` in .venv starts neither the CUDA plugin nor libtpu; a session under a GPU or
# TPU preset loads them. Safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,docs]'
.venv/bin/devmem compilers install -- --quiet
