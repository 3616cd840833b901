"""timm's model flags that `timm.create_model` cannot take for every architecture, applied to the built model.

timm's ``train.py`` hands ``--bn-momentum``/``--bn-eps`` to the model's constructor, which only some architectures
accept (a ResNet raises TypeError), and scales or sets the classifier head after creation. Here batch-norm settings
are set on every batch-norm module instead, so that they reach both branches of mixture BN (the clean layer and its
``adv_bn`` child) on every architecture.
"""
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from .options import ModelOptions

__all__ = ['architecture_kwargs', 'create_model_kwargs', 'set_batchnorm_options', 'init_classifier_head']


def architecture_kwargs(options: ModelOptions) -> Dict[str, Any]:
    """The `timm.create_model` arguments from the flags that evaluation must rebuild the model with: ``--gp`` (the
    pooling changes what is attacked, and its width the classifier's) and ``--model-kwargs``."""
    kwargs: Dict[str, Any] = {} if options.gp is None else dict(global_pool=options.gp)
    kwargs.update(options.model_kwargs)
    return kwargs


def create_model_kwargs(options: ModelOptions) -> Dict[str, Any]:
    """Keyword arguments of `timm.create_model` from the model flags: dropout, drop path, drop block and
    `architecture_kwargs` (unset flags leave the model's defaults)."""
    kwargs: Dict[str, Any] = dict(drop_rate=options.drop)
    optional = dict(drop_path_rate=options.drop_path, drop_block_rate=options.drop_block)
    kwargs.update((key, value) for key, value in optional.items() if value is not None)
    kwargs.update(architecture_kwargs(options))
    return kwargs


def set_batchnorm_options(model: nn.Module, momentum: Optional[float] = None, eps: Optional[float] = None) -> int:
    """Set the momentum and epsilon of every batch norm of `model` (None: leave it); returns how many were set."""
    if momentum is None and eps is None:
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            if momentum is not None:
                module.momentum = momentum
            if eps is not None:
                module.eps = eps
            count += 1
    return count


@torch.no_grad()
def init_classifier_head(model: nn.Module, scale: Optional[float] = None, bias: Optional[float] = None) -> None:
    """``--head-init-scale`` and ``--head-init-bias``, as timm's ``train.py``: scale the classifier's weight and bias,
    then set its bias.

    Raises:
        ValueError: A value is given but the model's classifier has no weight or bias to change.
    """
    if scale is None and bias is None:
        return
    head = model.get_classifier()
    if not isinstance(getattr(head, 'weight', None), torch.Tensor) or getattr(head, 'bias', None) is None:
        raise ValueError('--head-init-scale/--head-init-bias: the model\'s classifier has no weight and bias')
    if scale is not None:
        head.weight.mul_(scale)
        head.bias.mul_(scale)
    if bias is not None:
        nn.init.constant_(head.bias, bias)
