"""Vanilla (clean-only) training inside the same loop: the baseline every adversarial method is measured against.

Its cost is the budget unit, one forward+backward pass per image.
"""
import argparse
from typing import Dict, Optional, Tuple

import torch

from ..attacks.base import Attack
from ..attacks.space import InputSpace
from .adversarial import AdversarialClassificationTask
from .registry import register_task

__all__ = ['VanillaTask']


@register_task('vanilla')
class VanillaTask(AdversarialClassificationTask):
    """Standard training on clean images; no attack runs (the attack argument is ignored)."""

    default_eval_metric = 'top1'

    def __init__(self, model, attack=None, **kwargs):
        super().__init__(model, attack=None, **kwargs)

    @classmethod
    def attack_options(cls, args: argparse.Namespace) -> Tuple[str, ...]:
        """None: no attack runs."""
        return ()

    @classmethod
    def attack_from_args(cls, args: argparse.Namespace, space: InputSpace,
                         amp_dtype: Optional[torch.dtype] = None) -> Optional[Attack]:
        """None: vanilla training runs no attack, whatever ``--attack`` says."""
        return None

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        output = self.trainable_module(input)
        return {'loss': self.criterion(output, target), 'output': output}  # the clean loss is the whole loss
