"""Vanilla (clean-only) training inside the same loop: the baseline every adversarial method is measured against.

Its cost is the budget unit, one forward+backward pass per image.
"""
from typing import Dict, Tuple

import torch

from .adversarial import AdversarialClassificationTask
from .method_options import MethodOptions
from .registry import register_task

__all__ = ['VanillaTask']


@register_task('vanilla')
class VanillaTask(AdversarialClassificationTask):
    """Standard training on clean images; no attack runs (the attack argument is ignored)."""

    default_eval_metric = 'top1'

    def __init__(self, model, attack=None, **kwargs):
        super().__init__(model, attack=None, **kwargs)

    @classmethod
    def used_attack_options(cls, options: MethodOptions) -> Tuple[str, ...]:
        """None: vanilla training runs no attack, whatever ``--attack`` says."""
        return ()

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        output = self.trainable_module(input)
        return {'loss': self.criterion(output, target), 'output': output}  # the clean loss is the whole loss
