"""ResNets with batch-independent normalization: group norm (GN) and instance norm (IN).

Normalization statistics computed per image cannot mix the clean and adversarial domains of a batch, which is the
failure of BN in adversarial training:

* Xie & Yuille, *Intriguing Properties of Adversarial Training at Scale* (ICLR 2020), Section 4.3: replacing
  every BN of ResNet-152 by GN (32 groups, Wu & He 2018) keeps robustness under PGD-2000 with 100% adv + 100% clean
  training (`gn_resnet152`).
* Wang et al., *Removing Batch Normalization Boosts Adversarial Training* (NoFrost, ICML 2022), Table 3: standard
  adversarial training with IN instead of BN on ResNet-26 (`in_resnet26`).

Both families are timm's `ResNet` with another ``norm_layer``; nothing else changes.
"""
from functools import partial
from typing import Any

from timm.layers import GroupNorm
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.resnet import Bottleneck, ResNet

from ._cfg import NOFROST, XIE_YUILLE_2020, resnet_cfg
from ._tiny import TINY_CFG, TINY_RESNET_ARGS

__all__ = ['AffineInstanceNorm2d']


class AffineInstanceNorm2d(GroupNorm):
    """Instance normalization with a learned per-channel scale and shift, as group norm with one channel per group.

    The math is that of ``nn.InstanceNorm2d(affine=True, track_running_stats=False)``: per-image, per-channel
    statistics in training and at eval, biased variance, then a per-channel affine map; the parameter names
    (``weight``, ``bias``) are the same too. We compute it with timm's `GroupNorm` because one native group-norm
    kernel is faster than instance norm's reshape into a batch norm (1.5-6x in our CPU measurements of forward
    and backward), it honours timm's fast-norm switch, and it scripts and traces like every timm norm layer.

    Args:
        num_channels: Number of channels (and groups).
        eps: Added to the variance for numerical stability.
        affine: Learn the per-channel scale and shift.
    """

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True, **kwargs: Any):
        super().__init__(num_channels, num_groups=num_channels, eps=eps, affine=affine, **kwargs)


def _create_norm_resnet(variant: str, pretrained: bool = False, **kwargs: Any) -> ResNet:
    return build_model_with_cfg(ResNet, variant, pretrained, **kwargs)


# No released weights yet: untagged cfgs only, no hub ids.
default_cfgs = generate_default_cfgs({
    'gn_resnet26': resnet_cfg(XIE_YUILLE_2020),
    'gn_resnet50': resnet_cfg(XIE_YUILLE_2020),
    'gn_resnet152': resnet_cfg(XIE_YUILLE_2020),
    'test_gn_resnet': resnet_cfg(XIE_YUILLE_2020, **TINY_CFG),
    'in_resnet26': resnet_cfg(NOFROST, paper_ids='arXiv:2207.01156'),
    'in_resnet50': resnet_cfg(NOFROST, paper_ids='arXiv:2207.01156'),
    # Instance statistics of a 1x1 map are degenerate: the tiny IN model takes 64x64 input (2x2 last stage).
    'test_in_resnet': resnet_cfg(NOFROST, **dict(TINY_CFG, input_size=(3, 64, 64), pool_size=(2, 2))),
})


@register_model
def gn_resnet26(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-26 with group norm (32 groups)."""
    model_args = dict(block=Bottleneck, layers=(2, 2, 2, 2), norm_layer='groupnorm')
    return _create_norm_resnet('gn_resnet26', pretrained, **dict(model_args, **kwargs))


@register_model
def gn_resnet50(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-50 with group norm (32 groups); the architecture of timm's `resnet50_gn`."""
    model_args = dict(block=Bottleneck, layers=(3, 4, 6, 3), norm_layer='groupnorm')
    return _create_norm_resnet('gn_resnet50', pretrained, **dict(model_args, **kwargs))


@register_model
def gn_resnet152(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-152 with group norm (32 groups), Xie & Yuille's batch-independent model."""
    model_args = dict(block=Bottleneck, layers=(3, 8, 36, 3), norm_layer='groupnorm')
    return _create_norm_resnet('gn_resnet152', pretrained, **dict(model_args, **kwargs))


@register_model
def test_gn_resnet(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """Tiny group-norm ResNet for tests (timm's `test_resnet` layout; 8 groups, as its 16-channel stem needs)."""
    model_args = dict(TINY_RESNET_ARGS, norm_layer=partial(GroupNorm, num_groups=8))
    return _create_norm_resnet('test_gn_resnet', pretrained, **dict(model_args, **kwargs))


@register_model
def in_resnet26(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-26 with affine instance norm (NoFrost, Table 3)."""
    model_args = dict(block=Bottleneck, layers=(2, 2, 2, 2), norm_layer=AffineInstanceNorm2d)
    return _create_norm_resnet('in_resnet26', pretrained, **dict(model_args, **kwargs))


@register_model
def in_resnet50(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """ResNet-50 with affine instance norm."""
    model_args = dict(block=Bottleneck, layers=(3, 4, 6, 3), norm_layer=AffineInstanceNorm2d)
    return _create_norm_resnet('in_resnet50', pretrained, **dict(model_args, **kwargs))


@register_model
def test_in_resnet(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """Tiny instance-norm ResNet for tests (timm's `test_resnet` layout)."""
    model_args = dict(TINY_RESNET_ARGS, norm_layer=AffineInstanceNorm2d)
    return _create_norm_resnet('test_in_resnet', pretrained, **dict(model_args, **kwargs))
