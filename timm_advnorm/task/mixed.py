"""Goodfellow et al. (ICLR 2015) clean + adversarial training with a clean-image ratio (Xie & Yuille, §4.1).

``loss = α·CE(f(x_clean), y) + (1 - α)·CE(f(x_adv), y)``, α = 0.5. Every image of the batch is attacked; a
`clean_ratio` fraction of their clean counterparts is kept (Xie & Yuille remove 0-100% of them: Fig. 1). Clean and
adversarial rows share one forward, so a BN model estimates its statistics on the mixture — the effect under study.
"""
from dataclasses import dataclass
from typing import Dict

import torch

from ..arg_types import probability
from .adversarial import AdversarialClassificationTask
from .method_options import MethodOptions, option
from .registry import register_task

__all__ = ['MixedOptions', 'MixedTask']


@dataclass(frozen=True)
class MixedOptions(MethodOptions):
    """The mixed method's options: the clean loss's weight (alp and mbn read it too) and the clean images kept."""

    alpha: float = option(0.5, type=probability, help='Clean-loss weight (mixed, alp, mbn).')
    clean_ratio: float = option(1.0, type=probability, help='Share of clean images kept (mixed).')


@register_task('mixed')
class MixedTask(AdversarialClassificationTask):
    """Clean and adversarial images in one batch, weighted by `alpha`.

    Args:
        alpha: Weight of the clean loss (Goodfellow et al.: 0.5).
        clean_ratio: Fraction of the batch's clean images kept, in [0, 1].
    """

    options_class = MixedOptions

    def __init__(self, *args, alpha: float = 0.5, clean_ratio: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f'alpha must be in [0, 1], got {alpha}.')
        if not 0.0 <= clean_ratio <= 1.0:
            raise ValueError(f'clean_ratio must be in [0, 1], got {clean_ratio}.')
        self.alpha = alpha
        self.clean_ratio = clean_ratio

    @property
    def passes_per_image(self) -> float:
        return self.attack_steps + 1.0 + self.clean_ratio

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        x_adv = self.adversarial(input, target)
        n_clean = int(round(self.clean_ratio * input.shape[0]))
        output = self.trainable_module(torch.cat([input[:n_clean], x_adv]))
        out_clean, out_adv = output[:n_clean], output[n_clean:]
        loss_adv = self.criterion(out_adv, target)
        if n_clean == 0:  # Madry's objective: the adversarial loss is the whole loss
            return {'loss': loss_adv, 'output': out_adv}
        loss_clean = self.criterion(out_clean, target[:n_clean])
        loss = self.alpha * loss_clean + (1.0 - self.alpha) * loss_adv
        return {'loss': loss, 'output': out_adv, **self.loss_parts(loss_clean=loss_clean, loss_adv=loss_adv)}
