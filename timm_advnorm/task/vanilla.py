"""Vanilla (clean-only) training inside the same loop: the baseline every adversarial method is measured against.

Its cost is the budget unit, one forward+backward pass per image.
"""
from typing import Dict

import torch

from .adversarial import AdversarialClassificationTask

__all__ = ['VanillaTask']


class VanillaTask(AdversarialClassificationTask):
    """Standard training on clean images; no attack runs (the attack argument is ignored)."""

    method = 'vanilla'
    default_eval_metric = 'top1'

    def __init__(self, model, attack=None, **kwargs):
        super().__init__(model, attack=None, **kwargs)

    @property
    def attack_steps(self) -> int:
        return 0

    @property
    def passes_per_image(self) -> float:
        return 1.0

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        output = self.trainable_module(input)
        return {'loss': self.criterion(output, target), 'output': output}  # the clean loss is the whole loss
