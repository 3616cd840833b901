"""Adversarial logit pairing (Kannan et al., 2018) as re-implemented by Xie & Yuille (ICLR 2020, §4.1).

``loss = α·CE(f(x_clean), y) + (1 - α)·CE(f(x_adv), y) + λ·mean((f(x_clean) - f(x_adv))²)``: the mixed clean +
adversarial objective plus a squared-L2 penalty pulling each adversarial image's logits towards its clean pair's.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from ..arg_types import non_negative_float
from .method_options import MethodOptions, option, shared_option
from .mixed import MixedTask
from .registry import register_task

__all__ = ['AlpOptions', 'AlpTask', 'logit_pairing_loss']


@dataclass(frozen=True)
class AlpOptions(MethodOptions):
    """ALP's options: the mixed method's clean-loss weight and the pairing weight (None: each method's default; mbn
    reads it too)."""

    alpha: float = shared_option('mixed', 0.5)
    pairing_weight: Optional[float] = option(
        None, type=non_negative_float,
        help='Adversarial logit pairing weight (alp: default 0.5; mbn: default 0 = off).')


def logit_pairing_loss(logits_clean: torch.Tensor, logits_adv: torch.Tensor) -> torch.Tensor:
    """Mean squared difference between paired clean and adversarial logits (Kannan et al.'s L2 pairing term)."""
    return F.mse_loss(logits_adv.float(), logits_clean.float())


@register_task('alp')
class AlpTask(MixedTask):
    """Mixed clean + adversarial training with adversarial logit pairing; every clean image is kept.

    Args:
        pairing_weight: λ of the pairing term (Kannan et al.: 0.5).
        alpha: Weight of the clean cross-entropy.
    """

    options_class = AlpOptions

    def __init__(self, *args, pairing_weight: float = 0.5, **kwargs):
        super().__init__(*args, clean_ratio=1.0, **kwargs)
        self.pairing_weight = pairing_weight

    @classmethod
    def method_kwargs(cls, options: AlpOptions) -> Dict[str, Any]:
        """The pairing weight 0.5 (Kannan et al.) unless given."""
        return dict(alpha=options.alpha, pairing_weight=0.5 if options.pairing_weight is None else
                    options.pairing_weight)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        x_adv = self.adversarial(input, target)
        out_clean, out_adv = self.trainable_module(torch.cat([input, x_adv])).chunk(2)
        loss_clean = self.criterion(out_clean, target)
        loss_adv = self.criterion(out_adv, target)
        loss_pair = logit_pairing_loss(out_clean, out_adv)
        loss = self.alpha * loss_clean + (1.0 - self.alpha) * loss_adv + self.pairing_weight * loss_pair
        return {'loss': loss, 'output': out_adv,
                **self.loss_parts(loss_clean=loss_clean, loss_adv=loss_adv, loss_pair=loss_pair)}
