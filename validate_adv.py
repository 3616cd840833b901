#!/usr/bin/env python3
"""Robust evaluation of timm models, timm-style: the thin entry point of `timm_advnorm.commands.validate`.

    python validate_adv.py --checkpoint RUN/model_best.pth.tar --data-dir /imagenet --protocol xie2020 \\
        --gammas 0 0.5 1 --results-file results/xie2020.json --plot-dir results/plots
    torchrun --nproc_per_node 8 validate_adv.py -c eval.yaml --resume-state results/state.jsonl --amp

After ``pip install timm-advnorm`` the same command is ``timm-advnorm-validate`` (or ``python -m timm_advnorm.eval``).
"""
import sys

from timm_advnorm.commands.validate import run

if __name__ == '__main__':
    sys.exit(run('validate_adv.py'))
