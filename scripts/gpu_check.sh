#!/usr/bin/env bash
# The GPU kit (scripts/gpu_check.py): the CUDA tier, the five benchmarks at GPU sizes, a short ImageNet-shaped training
# run and its reduced xie2020 evaluation, then the compiled run, within --budget seconds (default 360); OUTDIR holds
# only what a GPU window brings back (gpu_report.md, environment.json, junit.xml, logs.tar.gz).
#   scripts/gpu_check.sh --prepare-wheels .whl          here, with network to PyPI: what a bare GPU machine lacks
#   scripts/gpu_check.sh --wheels .whl OUTDIR           on the GPU machine (python3 with a CUDA torch), offline
#   scripts/gpu_check.sh --device cpu --tiny OUTDIR     the same stages on tiny models on the CPU
# PYTHON selects the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
