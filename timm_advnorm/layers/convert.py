"""Conversions between plain BN, mixture BN, synchronized mixture BN and deployable single-branch models."""
import copy
from typing import Dict, Optional

import torch
import torch.nn as nn
from timm.layers import BatchNormAct2d, SyncBatchNormAct
from timm.layers.norm_act import convert_sync_batchnorm
from torch.nn.modules.batchnorm import _BatchNorm

from .mixture_bn import MixtureBatchNorm2d, MixtureBatchNormAct2d
from .sync_mixture_bn import SyncMixtureBatchNorm2d, SyncMixtureBatchNormAct2d

__all__ = ['convert_to_mixture_bn', 'convert_sync_mixture_bn', 'branch_state_dict', 'export_branch', 'ADV_BN_KEY']

#: The child module of a mixture BN layer holding the adversarial branch (state-dict keys ``*.adv_bn.*``).
ADV_BN_KEY = 'adv_bn'
_BN_STATE = ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')


def _bn_kwargs(bn: _BatchNorm) -> dict:
    weight = bn.weight if bn.weight is not None else bn.running_mean
    return dict(
        num_features=bn.num_features, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
        track_running_stats=bn.track_running_stats,
        device=weight.device if weight is not None else None,
        dtype=weight.dtype if weight is not None else None,
    )


def _copy_bn_state(src: nn.Module, dst: nn.Module) -> None:
    with torch.no_grad():
        for name in _BN_STATE:
            s, d = getattr(src, name, None), getattr(dst, name, None)
            if s is not None and d is not None:
                d.copy_(s)


def _is_act_bn(module: nn.Module) -> bool:
    return isinstance(module, (BatchNormAct2d, SyncBatchNormAct, MixtureBatchNormAct2d))


def _to_mixture(bn: _BatchNorm) -> MixtureBatchNorm2d:
    if bn.running_mean is not None and bn.running_mean.is_meta:
        raise ValueError('Convert a materialized model; meta tensors hold no statistics to copy.')
    cls = MixtureBatchNormAct2d if _is_act_bn(bn) else MixtureBatchNorm2d
    mbn = cls(**_bn_kwargs(bn))
    if _is_act_bn(bn):
        mbn.act, mbn.drop = bn.act, bn.drop
    _copy_bn_state(bn, mbn)
    mbn.copy_clean_to_adv()
    mbn.train(bn.training)
    return mbn


def convert_to_mixture_bn(module: nn.Module) -> nn.Module:
    """Replace every 2-D batch norm of `module` (timm's `BatchNormAct2d` included) by mixture BN.

    Statistics and affine parameters are copied into both branches, so the converted model computes exactly what
    the original did on every route (timm's zero-initialised last-BN gammas are zero in both branches). Activation
    and drop layers of `BatchNormAct2d` are kept. Modules are replaced in place; the (possibly new) root is returned.

    Raises:
        TypeError: A 1-D or 3-D batch norm, which mixture BN does not cover.
    """
    if isinstance(module, MixtureBatchNorm2d):
        return module
    if isinstance(module, _BatchNorm):
        if not isinstance(module, (nn.BatchNorm2d, nn.SyncBatchNorm)):
            raise TypeError(f'{type(module).__name__} is not a 2-D batch norm; mixture BN covers BatchNorm2d only.')
        return _to_mixture(module)
    for name, child in module.named_children():
        new_child = convert_to_mixture_bn(child)
        if new_child is not child:
            setattr(module, name, new_child)
    return module


def _to_sync(mbn: MixtureBatchNorm2d, process_group) -> SyncMixtureBatchNorm2d:
    cls = SyncMixtureBatchNormAct2d if isinstance(mbn, MixtureBatchNormAct2d) else SyncMixtureBatchNorm2d
    kwargs = _bn_kwargs(mbn)
    sync = cls(**kwargs, process_group=process_group)
    if isinstance(mbn, MixtureBatchNormAct2d):
        sync.act, sync.drop = mbn.act, mbn.drop
    sync.load_state_dict(mbn.state_dict(), strict=False)  # act/drop buffers (if any) already moved with the modules
    sync.route, sync.n_clean, sync.gamma = mbn.route, mbn.n_clean, mbn.gamma
    sync.train(mbn.training)
    return sync


def convert_sync_mixture_bn(module: nn.Module, process_group=None) -> nn.Module:
    """Synchronize batch statistics across processes without losing mixture-BN routing.

    torch's and timm's `convert_sync_batchnorm` turn any `_BatchNorm` subclass into a plain `SyncBatchNorm`, which
    silently drops the adversarial branch and the route. This converter turns mixture BN into
    `SyncMixtureBatchNorm2d` (each branch synchronized on its own rows) and hands every other batch norm to timm's
    converter.
    """
    if isinstance(module, SyncMixtureBatchNorm2d):
        return module
    if isinstance(module, MixtureBatchNorm2d):
        return _to_sync(module, process_group)
    if isinstance(module, _BatchNorm):
        return convert_sync_batchnorm(module, process_group)
    for name, child in module.named_children():
        new_child = convert_sync_mixture_bn(child, process_group)
        if new_child is not child:
            setattr(module, name, new_child)
    return module


def branch_state_dict(state_dict: Dict[str, torch.Tensor], branch: str = 'clean') -> Dict[str, torch.Tensor]:
    """State dict of the plain-BN architecture using one mixture-BN branch.

    Args:
        state_dict: A mixture-BN model's state dict.
        branch: ``clean`` keeps the main keys; ``adv`` moves each ``*.adv_bn.*`` tensor into its main slot.

    Returns:
        A new dict without any ``adv_bn`` key, loadable strictly into the plain timm architecture.
    """
    if branch not in ('clean', 'adv'):
        raise ValueError(f'branch must be "clean" or "adv", got {branch!r}.')
    marker = f'.{ADV_BN_KEY}.'
    out = {k: v for k, v in state_dict.items() if marker not in k and not k.startswith(f'{ADV_BN_KEY}.')}
    if branch == 'adv':
        adv_keys = [k for k in state_dict if marker in k]
        if not adv_keys:
            raise ValueError('No adversarial-BN keys in this state dict: it is not a mixture-BN model.')
        for k in adv_keys:
            out[k.replace(marker, '.')] = state_dict[k]
    return out


def _to_plain(mbn: MixtureBatchNorm2d, branch: str) -> nn.Module:
    kwargs = _bn_kwargs(mbn)
    if isinstance(mbn, MixtureBatchNormAct2d):
        plain = BatchNormAct2d(**kwargs)
        plain.act, plain.drop = mbn.act, mbn.drop
    else:
        plain = nn.BatchNorm2d(**kwargs)
    _copy_bn_state(mbn.adv_bn if branch == 'adv' else mbn, plain)
    plain.train(mbn.training)
    return plain


def export_branch(model: nn.Module, branch: str = 'clean', inplace: bool = False) -> nn.Module:
    """A plain-BN copy of `model` using one mixture-BN branch: deployable with stock timm and no plugin.

    Args:
        model: A model with mixture BN.
        branch: ``clean`` or ``adv``.
        inplace: Replace the layers of `model` itself instead of a deep copy.
    """
    if branch not in ('clean', 'adv'):
        raise ValueError(f'branch must be "clean" or "adv", got {branch!r}.')
    model = model if inplace else copy.deepcopy(model)

    def _replace(module: nn.Module) -> Optional[nn.Module]:
        if isinstance(module, MixtureBatchNorm2d):
            return _to_plain(module, branch)
        for name, child in module.named_children():
            new_child = _replace(child)
            if new_child is not None:
                setattr(module, name, new_child)
        return None

    replaced = _replace(model)
    return replaced if replaced is not None else model
