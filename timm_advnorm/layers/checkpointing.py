"""Gradient checkpointing that leaves batch-norm running statistics as an unchecked run leaves them.

timm's ``set_grad_checkpointing`` recomputes each checkpointed block during the backward pass. A batch norm in train
mode updates its running statistics (and ``num_batches_tracked``) in every forward, so the recomputation would count
each batch twice: torch's checkpoint restores the RNG and autocast state for the recomputation, not module buffers,
and timm's BN layers (`nn.BatchNorm2d`, timm's `BatchNormAct2d`, `nn.SyncBatchNorm`) call ``F.batch_norm`` with
their buffers either way. `set_grad_checkpointing` turns checkpointing on and guards every such layer: during a
recomputation its statistics are swapped for throw-away copies (the same tensors to save for autograd, so torch's
recomputation checks pass). Mixture BN guards itself (and keeps the route of the original forward).
"""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.hooks import RemovableHandle

from .mixture_bn import MixtureBatchNorm2d
from .recompute import is_recomputing
from .routing import mixture_bn_modules

__all__ = ['set_grad_checkpointing', 'guard_batch_norm_statistics', 'unguard_batch_norm_statistics']

_STATISTICS = ('running_mean', 'running_var', 'num_batches_tracked')


class _StatisticsGuard:
    """Forward hooks of one BN layer: during a checkpointing recomputation in training, the layer updates copies of
    its running statistics, and gets its own back afterwards (even when the recomputation stops early)."""

    def __init__(self, module: _BatchNorm):
        self.saved: Optional[Dict[str, torch.Tensor]] = None
        self.handles: List[RemovableHandle] = [
            module.register_forward_pre_hook(self.swap_in_copies),
            module.register_forward_hook(self.restore, always_call=True),
        ]

    def swap_in_copies(self, module: _BatchNorm, args: tuple) -> None:
        if not (module.training and module.track_running_stats and is_recomputing()):
            return
        self.saved = {name: module._buffers[name] for name in _STATISTICS if module._buffers.get(name) is not None}
        for name, buffer in self.saved.items():
            module._buffers[name] = buffer.clone()

    def restore(self, module: _BatchNorm, args: tuple, output) -> None:
        if self.saved is not None:
            module._buffers.update(self.saved)
            self.saved = None

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _guards(module: nn.Module) -> List[_StatisticsGuard]:
    return [hook.__self__ for hook in module._forward_pre_hooks.values()
            if isinstance(getattr(hook, '__self__', None), _StatisticsGuard)]


def _plain_batch_norms(model: nn.Module) -> List[_BatchNorm]:
    """The BN layers of `model` that run as modules and are not mixture BN (which guards itself; its adversarial
    branch is a plain BN whose tensors it uses, never called)."""
    adv_branches = {id(m.adv_bn) for m in mixture_bn_modules(model)}
    return [m for m in model.modules()
            if isinstance(m, _BatchNorm) and not isinstance(m, MixtureBatchNorm2d) and id(m) not in adv_branches]


def guard_batch_norm_statistics(model: nn.Module) -> int:
    """Keep the running statistics of `model`'s plain BN layers out of checkpointing recomputations.

    Idempotent: a layer already guarded (also in a deep copy of a guarded model) is left as it is.

    Returns:
        How many layers are guarded.
    """
    layers = _plain_batch_norms(model)
    for layer in layers:
        if not _guards(layer):
            _StatisticsGuard(layer)
    return len(layers)


def unguard_batch_norm_statistics(model: nn.Module) -> None:
    """Remove what `guard_batch_norm_statistics` installed."""
    for layer in _plain_batch_norms(model):
        for guard in _guards(layer):
            guard.remove()


def set_grad_checkpointing(model: nn.Module, enable: bool = True) -> nn.Module:
    """timm's ``model.set_grad_checkpointing(enable)``, with the running statistics of plain BN layers guarded while
    it is on (mixture BN needs nothing more).

    Args:
        model: A timm model (or any module with ``set_grad_checkpointing``).
        enable: Turn checkpointing on (and guard) or off (and unguard).

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: `model` has no ``set_grad_checkpointing``.
    """
    if not callable(getattr(model, 'set_grad_checkpointing', None)):
        raise ValueError(f'{type(model).__name__} has no gradient checkpointing (no set_grad_checkpointing method).')
    model.set_grad_checkpointing(enable)
    if enable:
        guard_batch_norm_statistics(model)
    else:
        unguard_batch_norm_statistics(model)
    return model
