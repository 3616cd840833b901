#!/usr/bin/env python3
"""Publish a checkpoint to the Hugging Face Hub or a local folder: the checkout's entry point of
`timm_advnorm.commands.publish` (``timm-advnorm-publish`` after ``pip install timm-advnorm``).

    python hub/publish.py CHECKPOINT --inference-branch adv --results results.json --repo-id org/name
    python hub/publish.py CHECKPOINT --branch adv --local-dir exports/name --dry-run --repo-id org/name

``python hub/publish.py --help`` lists the options; hub/README.md describes the release process.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's timm_advnorm, installed or not

from timm_advnorm.commands.publish import run  # noqa: E402

if __name__ == '__main__':
    sys.exit(run('hub/publish.py'))
