"""Mixture-BN adversarial training (Xie & Yuille, ICLR 2020, §4.2) and AdvProp (Xie et al., CVPR 2020).

Clean images are normalized by the clean (main) BN and adversarial images by the adversarial BN, in one fused
forward over ``cat([clean, adv])`` through the ``split`` route: convolutions see the whole batch, each BN branch only
its own domain. The attack runs on the adversarial branch. AdvProp is this method with a weak attack (PGD-1..5,
ε≈1-4) and the clean branch used at inference; Xie & Yuille's "MBN_adv" evaluates the adversarial branch.
"""
from typing import Dict

import torch

from ..layers.routing import has_mixture_bn, route
from .adversarial import AdversarialClassificationTask
from .alp import logit_pairing_loss

__all__ = ['MbnTask']


class MbnTask(AdversarialClassificationTask):
    """``α·CE(clean rows via clean BN) + (1 - α)·CE(adversarial rows via adversarial BN) [+ λ·ALP]``.

    Args:
        alpha: Weight of the clean loss (0.5: Xie & Yuille's mixed objective; AdvProp's sum of both losses is the
            same objective at twice the learning rate).
        pairing_weight: Optional adversarial logit pairing weight (Xie & Yuille's "MBN, ALP" rows); 0 disables it.
    """

    method = 'mbn'

    def __init__(self, model, *args, alpha: float = 0.5, pairing_weight: float = 0.0, **kwargs):
        if not has_mixture_bn(model):
            raise ValueError('The mbn method needs a mixture-BN model (e.g. mbn_resnet50, or convert one with '
                             'timm_advnorm.convert_to_mixture_bn).')
        super().__init__(model, *args, **kwargs)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f'alpha must be in [0, 1], got {alpha}.')
        self.alpha = alpha
        self.pairing_weight = pairing_weight

    @property
    def passes_per_image(self) -> float:
        return self.attack_steps + 2.0

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        x_adv = self.adversarial(input, target, branch='adv')
        n_clean = input.shape[0]
        with route(self.attack_module(), 'split', n_clean=n_clean):
            output = self.trainable_module(torch.cat([input, x_adv]))
        out_clean, out_adv = output[:n_clean], output[n_clean:]
        loss_clean = self.criterion(out_clean, target)
        loss_adv = self.criterion(out_adv, target)
        loss = self.alpha * loss_clean + (1.0 - self.alpha) * loss_adv
        parts = dict(loss_clean=loss_clean, loss_adv=loss_adv)
        if self.pairing_weight:
            loss_pair = logit_pairing_loss(out_clean, out_adv)
            loss = loss + self.pairing_weight * loss_pair
            parts['loss_pair'] = loss_pair
        return {'loss': loss, 'output': out_clean, **self.loss_parts(**parts)}
