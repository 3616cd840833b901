"""Mixture-BN adversarial training (Xie & Yuille, ICLR 2020, §4.2) and AdvProp (Xie et al., CVPR 2020).

Clean images are normalized by the clean (main) BN and adversarial images by the adversarial BN, in one fused
forward over the clean/adversarial pairs through the ``interleaved`` route: convolutions see the whole batch, each BN
branch only its own domain, and both branches run as one batch norm (channels_last batches use the ``split`` route
over ``cat([clean, adv])``). The attack runs on the adversarial branch.
AdvProp is this method with a weak attack (PGD-1..5, ε≈1-4) and the clean branch used at inference; Xie & Yuille's
"MBN_adv" evaluates the adversarial branch.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from ..layers.routing import deinterleave, has_mixture_bn, interleave, route
from .adversarial import AdversarialClassificationTask
from .alp import logit_pairing_loss
from .method_options import MethodOptions, shared_option
from .registry import register_task

__all__ = ['MbnOptions', 'MbnTask']


@dataclass(frozen=True)
class MbnOptions(MethodOptions):
    """MBN's options, the mixed method's clean-loss weight and ALP's pairing weight (None: off)."""

    alpha: float = shared_option('mixed', 0.5)
    pairing_weight: Optional[float] = shared_option('alp', None)


@register_task('mbn')
class MbnTask(AdversarialClassificationTask):
    """``α·CE(clean rows via clean BN) + (1 - α)·CE(adversarial rows via adversarial BN) [+ λ·ALP]``.

    Args:
        alpha: Weight of the clean loss (0.5: Xie & Yuille's mixed objective; AdvProp's sum of both losses is the
            same objective at twice the learning rate).
        pairing_weight: Optional adversarial logit pairing weight (Xie & Yuille's "MBN, ALP" rows); 0 disables it.
    """

    uses_both_branches = True
    trained_branches = ('clean', 'adv')
    default_eval_metric = 'adv_branch_robust_top1'  # Xie & Yuille's MBN_adv: the adversarial branch's robustness
    options_class = MbnOptions

    def __init__(self, model, *args, alpha: float = 0.5, pairing_weight: float = 0.0, **kwargs):
        if not has_mixture_bn(model):
            raise ValueError('The mbn method needs a mixture-BN model (e.g. mbn_resnet50, or convert one with '
                             'timm_advnorm.convert_to_mixture_bn).')
        super().__init__(model, *args, **kwargs)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f'alpha must be in [0, 1], got {alpha}.')
        self.alpha = alpha
        self.pairing_weight = pairing_weight

    @classmethod
    def method_kwargs(cls, options: MbnOptions) -> Dict[str, Any]:
        """The clean-loss weight, and the pairing weight, off unless given."""
        return dict(alpha=options.alpha, pairing_weight=options.pairing_weight or 0.0)

    @property
    def passes_per_image(self) -> float:
        return self.attack_steps + 2.0

    def _fused_forward(self, x_clean: torch.Tensor, x_adv: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Logits of the clean rows (clean BN) and the adversarial rows (adversarial BN) from one forward.

        NCHW batches go as pairs through the ``interleaved`` route (one batch norm per layer); channels_last ones
        through the ``split`` route, since pairs are not one batch of twice the channels in that memory layout.
        """
        model = self.attack_module()
        if x_clean.is_contiguous() or not x_clean.is_contiguous(memory_format=torch.channels_last):
            with route(model, 'interleaved'):
                return deinterleave(self.trainable_module(interleave(x_clean, x_adv)))
        with route(model, 'split', n_clean=len(x_clean)):
            output = self.trainable_module(torch.cat([x_clean, x_adv]))
        return output[:len(x_clean)], output[len(x_clean):]

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        input, target = self.mix(input, target)
        x_adv = self.adversarial(input, target, branch='adv')
        out_clean, out_adv = self._fused_forward(input, x_adv)
        loss_clean = self.criterion(out_clean, target)
        loss_adv = self.criterion(out_adv, target)
        loss = self.alpha * loss_clean + (1.0 - self.alpha) * loss_adv
        parts = dict(loss_clean=loss_clean, loss_adv=loss_adv)
        if self.pairing_weight:
            loss_pair = logit_pairing_loss(out_clean, out_adv)
            loss = loss + self.pairing_weight * loss_pair
            parts['loss_pair'] = loss_pair
        return {'loss': loss, 'output': out_clean, **self.loss_parts(**parts)}
