#!/usr/bin/env python3
"""Publish a checkpoint to the Hugging Face Hub or a local folder: weights, config.json and a model card.

    python hub/publish.py CHECKPOINT --inference-branch adv --results results.json --repo-id org/name
    python hub/publish.py CHECKPOINT --branch adv --local-dir exports/name --dry-run --repo-id org/name

``python hub/publish.py --help`` lists the options; hub/README.md describes the release process.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's timm_advnorm, installed or not

from timm_advnorm.hub.publish import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main(default_card_template=HERE / 'model_card_template.md'))
