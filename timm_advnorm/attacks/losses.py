"""Per-sample attack objectives on logits: margin, Carlini-Wagner and difference-of-logits-ratio (DLR) losses.

Every function maps logits (B, K) and class indices (B,) to a per-sample loss (B,) that an attack *ascends*; they
follow the `LossFn` signature of `core.py` so `input_gradient` and `pgd` accept them.
"""
import torch

__all__ = ['margin', 'cw_loss', 'dlr_loss', 'targeted_dlr_loss']


def _true_and_best_other(logits: torch.Tensor, labels: torch.Tensor):
    """Logit of the true class and the largest logit among the other classes, each (B,)."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], -float('inf'))
    return true, others.amax(dim=1)


def margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``z_y - max_{i != y} z_i``: positive while the sample is classified correctly (Square attack's objective)."""
    true, other = _true_and_best_other(logits, labels)
    return true - other


def cw_loss(logits: torch.Tensor, labels: torch.Tensor, confidence: float = 50.0) -> torch.Tensor:
    """Carlini-Wagner margin loss ``-max(z_y - max_{i != y} z_i + κ, 0)`` (Carlini & Wagner, S&P 2017).

    The L∞ form used by Zhang et al. (FAT, ICML 2020) and NoFrost's evaluation, with confidence κ=50 as in their code:
    the gradient keeps pushing until the best other class leads the true one by κ.
    """
    return -torch.clamp(margin(logits, labels) + confidence, min=0.0)


def dlr_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Difference of logits ratio ``-(z_y - max_{i != y} z_i) / (z_π1 - z_π3)`` (Croce & Hein, ICML 2020, eq. 5).

    π sorts the logits in decreasing order. Invariant to shifting and rescaling the logits, so a model cannot mask
    gradients by scaling its outputs. Needs at least three classes.
    """
    top = logits.topk(3, dim=1).values
    return -margin(logits, labels) / (top[:, 0] - top[:, 2] + 1e-12)


def targeted_dlr_loss(logits: torch.Tensor, labels_and_targets: torch.Tensor) -> torch.Tensor:
    """Targeted DLR ``-(z_y - z_t) / (z_π1 - (z_π3 + z_π4) / 2)`` (Croce & Hein, ICML 2020, eq. 6).

    Args:
        logits: (B, K) with K >= 4.
        labels_and_targets: (B, 2) long: true class y in column 0, target t in column 1 (one tensor, so rows can be
            selected together as the attack drops fooled samples).
    """
    top = logits.topk(4, dim=1).values
    true = logits.gather(1, labels_and_targets[:, :1]).squeeze(1)
    target = logits.gather(1, labels_and_targets[:, 1:]).squeeze(1)
    return -(true - target) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + 1e-12)
