#!/usr/bin/env bash
# The GPU kit (scripts/gpu_check.py): the CUDA tier, the five benchmarks at GPU sizes, a short ImageNet-shaped training
# run (plain and compiled) and its reduced xie2020 evaluation, each stage with its own timeout, in under ten minutes;
# writes OUTDIR/gpu_report.md.
#   scripts/gpu_check.sh --prepare-wheels .whl       here, with network to PyPI: what a bare GPU machine lacks
#   scripts/gpu_check.sh --wheels .whl OUTDIR        on the GPU machine (python3 with a CUDA torch), offline
#   scripts/gpu_check.sh --device cpu --tiny OUTDIR  the same stages on tiny models on the CPU, in a few minutes
# PYTHON selects the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
