"""Fold eval-mode batch norm into the preceding convolution, so an attack iteration runs fewer layers.

With running statistics a BN layer is a per-channel affine map ``y = s * z + t`` with ``s = gamma / sqrt(var + eps)``
and ``t = beta - mean * s``. Applied to a convolution's output ``z = W * x + b`` it is the convolution with weight
``s * W`` and bias ``s * b + t``: the same function, one layer fewer in each forward and backward pass. An attack
with running statistics (every evaluation, standard adversarial training) never updates the weights during the
attack, so folding once per attack call pays for itself after a fraction of one iteration.

Only what provably is "convolution feeding one BN" is folded. The model is traced symbolically with torch.fx (timm's
no-trace modules stay leaves), and a (conv, BN) pair is folded only if both are of an exact known type, each is
called exactly once, neither has hooks (a hook would be lost or see the folded weight; hook-based weight or spectral
norm among them) nor parameters read elsewhere in the graph, and the convolution's output goes to that BN alone.
A model that does not trace, a module
called twice (e.g. `LogitInterpolation` runs the network once per route), a BN in training mode, without running
statistics or on the ``split`` or ``interleaved`` route stays unfolded. Mixture BN folds the branch of its current
route (``clean``, ``adv``, or the ``mix`` interpolation, itself affine).
"""
import copy
import itertools
import logging
import weakref
from collections import Counter
from typing import List, Optional, Tuple

import torch
import torch.fx
import torch.nn as nn
from timm.layers import BatchNormAct2d, Conv2dSame
from timm.layers._fx import get_notrace_modules

from ..layers.mixture_bn import MixtureBatchNorm2d, MixtureBatchNormAct2d
from ..layers.sync_mixture_bn import SyncMixtureBatchNorm2d, SyncMixtureBatchNormAct2d

__all__ = ['find_conv_bn_pairs', 'fold_batchnorm', 'BatchNormFolder']

_logger = logging.getLogger(__name__)

# Exact types only: a subclass may change the forward (e.g. weight-standardized convolutions) and fold wrongly.
_CONV_TYPES = (nn.Conv2d, Conv2dSame)
_PLAIN_BN_TYPES = (nn.BatchNorm2d, nn.SyncBatchNorm)
_MIXTURE_BN_TYPES = (MixtureBatchNorm2d, SyncMixtureBatchNorm2d)
_BN_ACT_TYPES = (BatchNormAct2d, MixtureBatchNormAct2d, SyncMixtureBatchNormAct2d)
_BN_TYPES = _PLAIN_BN_TYPES + _MIXTURE_BN_TYPES + _BN_ACT_TYPES
_HOOK_DICTS = ('_forward_hooks', '_forward_pre_hooks', '_backward_hooks', '_backward_pre_hooks')


class _LeafTracer(torch.fx.Tracer):
    """Tracer keeping convolutions, BN layers and timm's no-trace modules as leaves."""

    def __init__(self):
        super().__init__()
        self._leaves = tuple(set(get_notrace_modules()) | set(_CONV_TYPES) | set(_BN_TYPES))

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return type(m) in self._leaves or super().is_leaf_module(m, module_qualified_name)


def _has_hooks(module: nn.Module) -> bool:
    return any(getattr(module, name, None) for name in _HOOK_DICTS)


def find_conv_bn_pairs(model: nn.Module) -> List[Tuple[str, str]]:
    """Qualified names of the (convolution, BN) pairs of `model` that folding may merge.

    Depends only on the model's structure (not on its weights, mode or route), so a caller attacking the same
    model repeatedly may compute it once.

    Returns:
        ``(conv_name, bn_name)`` pairs; empty when the model does not trace symbolically.
    """
    try:
        graph = _LeafTracer().trace(model)
    except Exception as e:  # tracing arbitrary user models can fail in many ways; folding is only an optimization
        _logger.debug('BN folding disabled: %s does not trace symbolically (%s).', type(model).__name__, e)
        return []
    calls = Counter(n.target for n in graph.nodes if n.op == 'call_module')
    read_owners = {n.target.rpartition('.')[0] for n in graph.nodes if n.op == 'get_attr'}
    modules = dict(model.named_modules())

    def foldable(name: str, types: Tuple[type, ...]) -> bool:
        module = modules[name]
        return type(module) in types and calls[name] == 1 and name not in read_owners and not _has_hooks(module)

    pairs = []
    for node in graph.nodes:
        if node.op != 'call_module' or not foldable(node.target, _CONV_TYPES) or len(node.users) != 1:
            continue
        user = next(iter(node.users))
        if user.op != 'call_module' or not foldable(user.target, _BN_TYPES):
            continue
        if user.args != (node,) or user.kwargs:
            continue
        if modules[node.target].out_channels != modules[user.target].num_features:
            continue
        pairs.append((node.target, user.target))
    return pairs


def _branch_affine(
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
        eps: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (scale, shift) of one eval-mode BN branch."""
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return scale, shift


def _bn_affine(bn: nn.Module) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """Eval-mode (scale, shift) of `bn` on its current route, or None when it is not a fixed affine map."""
    if bn.training or bn.running_mean is None or bn.running_var is None:
        return None
    clean = _branch_affine(bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps)
    if not isinstance(bn, MixtureBatchNorm2d) or bn.route == 'clean':
        return clean
    adv_bn = bn.adv_bn
    if adv_bn.running_mean is None or adv_bn.running_var is None:
        return None
    adv = _branch_affine(adv_bn.weight, adv_bn.bias, adv_bn.running_mean, adv_bn.running_var, bn.eps)
    if bn.route == 'adv':
        return adv
    if bn.route == 'mix':
        return torch.lerp(clean[0], adv[0], bn.gamma), torch.lerp(clean[1], adv[1], bn.gamma)
    return None  # 'split', 'interleaved': rows take different branches, not one affine map


def _set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition('.')
    setattr(root.get_submodule(parent_name) if parent_name else root, child, module)


@torch.no_grad()
def fold_batchnorm(
        model: nn.Module,
        pairs: Optional[List[Tuple[str, str]]] = None,
        channels_last: Optional[bool] = None,
) -> nn.Module:
    """A copy of `model` computing the same function, with eval-mode BN folded into the preceding convolutions.

    Folded BN layers become `nn.Identity` (``BatchNormAct2d``-like layers keep their ``drop`` and ``act``). The copy
    is meant for attacking, not training: only the folded convolutions get new tensors; every other parameter and
    buffer is shared with `model`, so making the copy costs O(folded conv weights), not a full model copy. `model`
    itself is left untouched. The folded weights do not require gradients.

    Args:
        model: The model, in the mode and route it will be attacked in (BN in eval mode to fold).
        pairs: Output of `find_conv_bn_pairs(model)` if already known.
        channels_last: Memory layout of the folded weights, which convolutions pass on to their outputs. ``None``:
            channels_last on the CPU, where oneDNN runs it 1.2-1.4x faster per attack iteration (forward and input
            gradient, fp32, ResNets and EfficientNet on an AVX-512 machine), else each convolution's own layout.

    Returns:
        The folded copy, or `model` itself when nothing can be folded.
    """
    pairs = find_conv_bn_pairs(model) if pairs is None else pairs
    affines = {bn_name: _bn_affine(model.get_submodule(bn_name)) for _, bn_name in pairs}
    pairs = [(conv_name, bn_name) for conv_name, bn_name in pairs if affines[bn_name] is not None]
    if not pairs:
        return model
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    folded = copy.deepcopy(model, memo=shared)
    for conv_name, bn_name in pairs:
        conv, bn = folded.get_submodule(conv_name), folded.get_submodule(bn_name)
        scale, shift = affines[bn_name]
        weight = conv.weight * scale.to(conv.weight.dtype).view(-1, 1, 1, 1)
        to_channels_last = channels_last if channels_last is not None else (
            weight.device.type == 'cpu' or conv.weight.is_contiguous(memory_format=torch.channels_last))
        weight = weight.contiguous(memory_format=torch.channels_last if to_channels_last else torch.contiguous_format)
        bias = shift if conv.bias is None else conv.bias * scale + shift
        conv.weight = nn.Parameter(weight, requires_grad=False)
        conv.bias = nn.Parameter(bias.to(conv.weight.dtype), requires_grad=False)
        replacement = nn.Sequential(bn.drop, bn.act) if isinstance(bn, _BN_ACT_TYPES) else nn.Identity()
        _set_submodule(folded, bn_name, replacement)
    return folded


def _agrees_on(folded: nn.Module, model: nn.Module, example: torch.Tensor) -> bool:
    """Whether `folded` runs on `example` and matches `model` there up to the rounding folding changes."""
    try:
        with torch.no_grad():
            got, expected = folded(example), model(example)
    except RuntimeError:  # e.g. a `.view` of a feature map on the channels_last layout
        return False
    tolerance = max(1e-3, 64 * torch.finfo(expected.dtype).eps)
    scale = expected.abs().max().item()
    return torch.allclose(got.float(), expected.float(), rtol=tolerance, atol=tolerance * scale)


class BatchNormFolder:
    """Callable folding a model per call while tracing and checking its structure only once.

    Weights and statistics change between attack calls during training, so the fold itself is redone every call;
    the (conv, BN) pairs depend only on the model's structure and are traced again only when the model or the
    types of its modules change. Given an example input, the first fold of a structure is checked against the model
    on one sample: code that tracing cannot see (inside timm's no-trace modules, global hooks) or a ``.view`` of a
    feature map, which fails on the channels_last layout of the CPU default, then falls back to each convolution's
    own layout, or to no folding, for as long as the structure stays.
    """

    def __init__(self):
        self._model: Optional[weakref.ref] = None
        self._signature: Tuple[type, ...] = ()
        self._pairs: List[Tuple[str, str]] = []
        self._channels_last: Optional[bool] = None  # None: fold_batchnorm's default
        self._checked = False

    def __call__(self, model: nn.Module, example: Optional[torch.Tensor] = None) -> nn.Module:
        """`fold_batchnorm(model)`, reusing the pairs traced for the same model.

        Args:
            model: The model, in the mode and route it will be attacked in.
            example: Inputs the folded copy will see (one sample is used), for the check of a new structure.
        """
        signature = tuple(type(m) for m in model.modules())
        if self._model is None or self._model() is not model or signature != self._signature:
            self._model, self._signature, self._pairs = weakref.ref(model), signature, find_conv_bn_pairs(model)
            self._channels_last, self._checked = None, False
        folded = fold_batchnorm(model, self._pairs, self._channels_last)
        if self._checked or folded is model or example is None or not len(example):
            return folded
        self._checked = True
        example = example[:1].detach()
        if _agrees_on(folded, model, example):
            return folded
        self._channels_last = False
        folded = fold_batchnorm(model, self._pairs, channels_last=False)
        if _agrees_on(folded, model, example):
            return folded
        _logger.warning('BN folding disabled for %s: the folded copy does not compute the same function.',
                        type(model).__name__)
        self._pairs = []
        return model
