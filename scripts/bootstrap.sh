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
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -e '.[test,docs]'
# pip compiles the bytecode of what it installs in one process; compileall does it on every core (about
# 13 s less on 2 cores for a fresh .venv) and skips what is compiled already. Written now, not at first import,
# so that every process starts from it, one with PYTHONDONTWRITEBYTECODE set too. A file that does not
# compile (a template some package ships as .py) is left as pip leaves it, hence the `|| true`. The
# packages' own test suites (2,600 files in their tests/ folders, which nothing here imports) are left
# out: 13 s of the 44 on 2 cores.
# The compilers' install (mostly reading the package index and unpacking) goes on meanwhile: about 10 s
# less on a fresh machine with 2 cores. Bytecode files are written whole (a rename), so the `devmem`
# command never reads one half-written.
.venv/bin/python -m compileall -qq -j 0 -x '/tests/' "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" &
compiling=$!
.venv/bin/devmem compilers install -- --quiet
wait "$compiling" || true
