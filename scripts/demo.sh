#!/usr/bin/env bash
# The main job on the built-in digits data (no download): set up, adversarially train a tiny mixture-BN ResNet
# (method mbn), train the same model on clean images only (method vanilla), then evaluate both with
# validate_adv.py under PGD and print the comparison. Each run gets a new folder: nothing is overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
OUT=${DEMO_OUT:-output/demo-$(date +%Y%m%d-%H%M%S)}
if [ -e "$OUT" ]; then
  echo "demo.sh: error: $OUT already exists; set DEMO_OUT to a new folder" >&2
  exit 2
fi
EVAL=(--dataset digits --attacks pgd --attack-eps 16 --attack-step 2 --attack-steps 20 --num-samples 359 --workers 0
      --no-progress)

"$PY" train_adv.py -c digits_demo_mbn --output "$OUT" --experiment adversarial
"$PY" train_adv.py -c digits_demo_mbn --method vanilla --output "$OUT" --experiment clean
"$PY" validate_adv.py "${EVAL[@]}" --checkpoint "$OUT/adversarial/last.pth.tar" --gammas 0 0.5 1 \
    --results-file "$OUT/adversarial/robust.json" --plot-dir "$OUT/adversarial/plots"
"$PY" validate_adv.py "${EVAL[@]}" --checkpoint "$OUT/clean/last.pth.tar" --gammas 0 \
    --results-file "$OUT/clean/robust.json"
echo
"$PY" scripts/demo_report.py "adversarial (mbn)=$OUT/adversarial/robust.json" "clean (vanilla)=$OUT/clean/robust.json" \
    | tee "$OUT/report.md"
