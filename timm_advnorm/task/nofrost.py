"""NoFrost: normalizer-free robust training (Wang et al., ICML 2022).

``loss = (1 - λ)·CE(f(x_clean), y) + λ·CE(f(x_adv), y)`` with λ = 0.5 on a normalizer-free ResNet (no BN, so no
mixture of clean and adversarial statistics to estimate), PGD-10 at ε = 8; its released training clips no gradient
(``--clip-mode agc`` is available).
"""
from dataclasses import dataclass

from torch.nn.modules.batchnorm import _BatchNorm

from ..arg_types import non_negative_float
from .method_options import MethodOptions, option
from .mixed import MixedTask
from .registry import register_task

__all__ = ['NofrostOptions', 'NofrostTask']


@dataclass(frozen=True)
class NofrostOptions(MethodOptions):
    """NoFrost's option: λ, the adversarial loss's weight (Fast AdvProp reads it as its adversarial rows' β)."""

    adv_weight: float = option(0.5, type=non_negative_float,
                               help='Adversarial-loss weight λ (nofrost) / β of adversarial rows (fast_advprop).')


@register_task('nofrost')
class NofrostTask(MixedTask):
    """Clean + adversarial training of a normalizer-free model.

    Args:
        adv_weight: λ, the weight of the adversarial loss (NoFrost: 0.5).
    """

    options_class = NofrostOptions

    def __init__(self, model, *args, adv_weight: float = 0.5, **kwargs):
        if any(isinstance(m, _BatchNorm) for m in model.modules()):
            raise ValueError('NoFrost trains normalizer-free models; this model has batch norm '
                             '(use e.g. nf_resnet50 or one of the deep NF ResNets).')
        if not 0.0 <= adv_weight <= 1.0:  # said here: the base class would name its clean weight, 1 - λ
            raise ValueError(f'adv_weight (λ) must be in [0, 1], got {adv_weight}.')
        super().__init__(model, *args, alpha=1.0 - adv_weight, clean_ratio=1.0, **kwargs)
        self.adv_weight = adv_weight
