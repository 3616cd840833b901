"""Logit interpolation between the two mixture-BN branches (NoFrost, Wang et al. 2022, Appendix A)."""
import torch
import torch.nn as nn

from .routing import route

__all__ = ['LogitInterpolation']


class LogitInterpolation(nn.Module):
    """Inference wrapper returning ``(1 - gamma) * z_clean + gamma * z_adv``.

    Unlike the ``mix`` route, which interpolates features inside every BN layer, this runs the clean and the
    adversarial branch end to end and interpolates their logits: sweeping `gamma` traces the clean-vs-robust
    trade-off of one trained model.

    Args:
        model: A model with mixture BN.
        gamma: Weight of the adversarial branch, in [0, 1].
    """

    def __init__(self, model: nn.Module, gamma: float = 0.5):
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f'gamma must be in [0, 1], got {gamma}.')
        self.model = model
        self.gamma = gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with route(self.model, 'clean'):
            z_clean = self.model(x)
        with route(self.model, 'adv'):
            z_adv = self.model(x)
        return torch.lerp(z_clean, z_adv, self.gamma)
