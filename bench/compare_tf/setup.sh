#!/usr/bin/env bash
# Creates bench/compare_tf/.venv with TensorFlow (CPU build) for the
# pscluster-vs-TensorFlow comparison. Not part of ./run_tests.sh.
# Idempotent: an existing venv with the pinned version is left alone.
# Network: PyPI only (tensorflow-cpu is ~250 MB with its dependencies).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
TF_VERSION="${TF_VERSION:-2.20.0}"   # has cp311 manylinux wheels
# Any CPython 3.9-3.13 with venv+ensurepip works; Debian's 3.11 is the default.
PYTHON="${PYTHON:-/usr/bin/python3}"
command -v "$PYTHON" >/dev/null || PYTHON=python3

if [[ -x "$VENV/bin/python" ]] && \
   "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('tensorflow-cpu') != '$TF_VERSION')" 2>/dev/null; then
  echo "compare_tf/setup: $VENV already has tensorflow-cpu $TF_VERSION"
  exit 0
fi

echo "compare_tf/setup: creating $VENV with $("$PYTHON" --version)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "tensorflow-cpu==$TF_VERSION"
"$VENV/bin/python" -c "import tensorflow as tf, numpy as np; print('compare_tf/setup: tensorflow', tf.__version__, 'numpy', np.__version__)"
