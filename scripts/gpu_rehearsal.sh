#!/usr/bin/env bash
# Rehearse a GPU window on the CPU: build a second environment with the GPU machine's torch / torchvision pair
# (not constraints.txt's), from the registry, and run the GPU kit's tiny mode in it, compiled with inductor where a
# C++ compiler exists, so that the kit's code meets that torch, and inductor, before the GPU does.
#   bash scripts/gpu_rehearsal.sh OUTDIR [more gpu_check.sh options]
# VENV selects the environment's folder (default .venv-gpu-pair; made once, reused after). Beside the project it holds
# what the GPU machine's python3 has too (pytest, pytest-timeout, scipy, scikit-learn) and torchattacks.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "gpu_rehearsal.sh: error: OUTDIR is required" >&2; exit 2; }
# The GPU machine's pair, as its python3 has them (see docs/development.rst, the GPU kit).
TORCH_PAIR=("torch==2.11.0" "torchvision==0.26.0")
VENV=${VENV:-.venv-gpu-pair}
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
printf '%s\n' "${TORCH_PAIR[@]}" "$(grep -E '^timm==' constraints.txt)" > "$constraints"
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -c "$constraints" "${TORCH_PAIR[@]}" -e . pytest pytest-timeout scipy scikit-learn
"$VENV/bin/python" -m pip install --quiet --no-deps torchattacks==3.5.1
PYTHON="$VENV/bin/python" exec bash scripts/gpu_check.sh --device cpu --tiny --budget 600 "$@"
