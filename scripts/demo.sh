#!/usr/bin/env bash
# The main job on the built-in digits data (no download): set up, then run `timm-advnorm-demo` (the module
# timm_advnorm.commands.demo): adversarially train a tiny mixture-BN ResNet (method mbn), train the same model on
# clean images only (method vanilla), evaluate both under PGD and print the comparison. Each run gets a new folder
# (DEMO_OUT, or output/demo-<time>): nothing is overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m timm_advnorm.commands.demo --output "${DEMO_OUT:-output/demo-$(date +%Y%m%d-%H%M%S)}" "$@"
