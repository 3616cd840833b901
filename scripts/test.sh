#!/usr/bin/env bash
# Set up (if needed) and run the whole offline test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-}
exec .venv/bin/python -m pytest -q --durations=25 "$@"
