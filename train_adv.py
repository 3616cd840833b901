#!/usr/bin/env python3
"""Adversarial training of timm models, timm-style: the thin entry point of `timm_advnorm.commands.train`.

    python train_adv.py -c digits_demo_mbn                    # a packaged recipe (--list-recipes)
    torchrun --nproc_per_node=8 train_adv.py -c xie2020_mbn_resnet152 --data-dir /imagenet

After ``pip install timm-advnorm`` the same command is ``timm-advnorm-train`` (or ``python -m timm_advnorm.train``).
"""
import sys

from timm_advnorm.commands.train import run

if __name__ == '__main__':
    sys.exit(run('train_adv.py'))
