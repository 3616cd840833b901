"""What every attack shares: the model state it runs under, input-only gradients, and target sampling.

An attack must leave the model exactly as it found it: train/eval mode, mixture-BN route, `requires_grad` flags and
BN running statistics. It never accumulates parameter gradients and needs no DDP wrapper (pass the unwrapped
module), so no reducer or buffer broadcast runs per attack step.
"""
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ..layers.routing import preserve_route
from .losses import margin

__all__ = ['BN_STATS', 'LossFn', 'attack_context', 'input_gradient', 'cross_entropy_per_sample', 'random_targets',
           'is_fooled', 'fooling_tier', 'fooling_margin', 'rounding_tolerance', 'is_clearly_fooled']

BN_STATS = ('running', 'batch')
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _bn_buffers(model: nn.Module) -> List[torch.Tensor]:
    buffers = []
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            buffers.extend(b for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None)
    return buffers


@contextmanager
def attack_context(model: nn.Module, bn_stats: str = 'running') -> Iterator[nn.Module]:
    """Run an attack on `model` and restore everything it touched.

    Args:
        model: The unwrapped module (not DDP).
        bn_stats: ``running``: eval mode, BN uses running statistics (standard adversarial training and every
            evaluation). ``batch``: BN layers in train mode use the attacked batch's statistics (Fast AdvProp);
            running statistics are restored afterwards, and every other layer (dropout, drop-path) stays in eval.
    """
    if bn_stats not in BN_STATS:
        raise ValueError(f'bn_stats must be one of {BN_STATS}, got {bn_stats!r}.')
    modes = [(m, m.training) for m in model.modules()]
    grads = [(p, p.requires_grad) for p in model.parameters()]
    saved_stats: List[Tuple[torch.Tensor, torch.Tensor]] = []
    try:
        with preserve_route(model):
            model.eval()
            if bn_stats == 'batch':
                saved_stats = [(b, b.clone()) for b in _bn_buffers(model)]
                for m in model.modules():
                    if isinstance(m, _BatchNorm):
                        m.train()
            for p, _ in grads:
                p.requires_grad_(False)
            yield model
    finally:
        with torch.no_grad():
            for buf, saved in saved_stats:
                buf.copy_(saved)
        for p, flag in grads:
            p.requires_grad_(flag)
        for m, flag in modes:
            m.training = flag


#: Loss scale of an attack's backward under float16 autocast. Input gradients of a deep network are often below
#: float16's smallest normal number (6e-5) and flush to zero in the backward, and a sign-gradient step of zero stalls
#: the attack; scaled by 2**12 they stay representable, while a per-sample loss gradient (at most about 1 per logit)
#: stays far from float16's largest value. A backward that overflows anyway is redone unscaled.
FP16_LOSS_SCALE = 2.0 ** 12


def input_gradient(
        model: nn.Module,
        x: torch.Tensor,
        target: torch.Tensor,
        loss_fn: LossFn,
        autocast_dtype: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradient of the summed per-sample loss with respect to the input only.

    Args:
        model: Model under `attack_context`.
        x: Input batch (normalized), any grad state; it is not modified.
        target: Labels (B,), or soft targets (B, C) for losses that accept them.
        loss_fn: Per-sample loss ``loss_fn(logits, target) -> (B,)``; evaluated in fp32.
        autocast_dtype: Run the forward under autocast at this dtype (bf16 is safe: the loss and the returned
            gradient are fp32; under float16 the loss is scaled by `FP16_LOSS_SCALE` for the backward, see there).

    Returns:
        ``(grad, logits, per_sample_loss)``, all detached; in fp32 (fp64 for an fp64 model).
    """
    x = x.detach().requires_grad_(True)
    enabled = autocast_dtype is not None
    with torch.enable_grad(), torch.autocast(x.device.type, dtype=autocast_dtype, enabled=enabled):
        logits = model(x)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 at least; fp64 stays fp64
    scale = FP16_LOSS_SCALE if autocast_dtype == torch.float16 else 1.0
    with torch.enable_grad():
        loss = loss_fn(logits, target)
        grad, = torch.autograd.grad(loss.sum() * scale, x, retain_graph=scale != 1.0)
        if scale != 1.0 and not torch.isfinite(grad).all():  # overflowed: the unscaled gradient, as without scaling
            scale = 1.0
            grad, = torch.autograd.grad(loss.sum(), x)
    return grad.to(logits.dtype) / scale, logits.detach(), loss.detach()


def cross_entropy_per_sample(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy for hard (B,) or soft (B, C) targets."""
    return F.cross_entropy(logits, target, reduction='none')


def random_targets(labels: torch.Tensor, num_classes: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Targets drawn uniformly among the classes other than each true label.

    A plain ``randint(0, C)`` can return the true class (then the "targeted" attack is no attack); drawing an offset
    in [1, C-1] and adding it modulo C makes every other class equally likely and the true class impossible.
    """
    if num_classes < 2:
        raise ValueError('Targeted attacks need at least two classes.')
    offsets = torch.randint(1, num_classes, labels.shape, generator=generator, device='cpu').to(labels.device)
    return (labels + offsets) % num_classes


def is_fooled(logits: torch.Tensor, labels: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per-sample success: misclassified (untargeted) or classified as the target (targeted)."""
    pred = logits.argmax(dim=1)
    return pred == targets if targets is not None else pred != labels


def fooling_tier(logits: torch.Tensor, labels: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per-sample rank of an iterate by what the attack's own forward saw, higher better for the attacker (int8).

    3: fooled as the attack counts it (`is_fooled`: misclassified, or on the target when targeted); 1: a targeted
    attack missed its target but the prediction is wrong all the same, which the accuracy reported alongside the
    success rate counts; 0: correctly classified.
    """
    pred = logits.argmax(dim=1)
    return 2 * is_fooled(logits, labels, targets).to(torch.int8) + (pred != labels).to(torch.int8)


def fooling_margin(logits: torch.Tensor, labels: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per-sample logit distance past the decision boundary, positive when fooled.

    Untargeted ``max_{i != y} z_i - z_y``; targeted ``z_t - max_{i != t} z_i``.
    """
    logits = logits.float()
    return margin(logits, targets) if targets is not None else -margin(logits, labels)


def rounding_tolerance(logits: torch.Tensor, autocast_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Per-sample logit change that re-scoring the same input may show: a fooling margin must exceed it to count.

    An evaluation attack decides from its own forward passes (BN folded into the convolutions, maybe bf16 under
    autocast, a pruned batch) which samples are fooled, then keeps that iterate and stops attacking them; the
    reported accuracy comes from a fresh forward of the model as given. Those forwards round differently: the logits
    differ by about 1e-6 of their scale in fp32 and 1-2% in bf16 (measured with BN folding, ResNets and
    EfficientNet). A sample fooled by less would be scored robust after the attack gave up on it, so the attack
    wants 8 units of roundoff of the forward's precision, and at least 1e-4, of the largest logit's magnitude.
    """
    unit = torch.finfo(autocast_dtype if autocast_dtype is not None else torch.float32).eps
    return max(8.0 * unit, 1e-4) * logits.detach().float().abs().amax(dim=1)


def is_clearly_fooled(
        logits: torch.Tensor,
        labels: torch.Tensor,
        targets: Optional[torch.Tensor] = None,
        autocast_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """`is_fooled` by more than `rounding_tolerance`: what an evaluation attack may record and stop attacking."""
    return fooling_margin(logits, labels, targets) > rounding_tolerance(logits, autocast_dtype)
