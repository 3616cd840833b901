"""ResNets with mixture batch normalization (MBN): one BN for clean images, one for adversarial images.

Xie & Yuille, *Intriguing Properties of Adversarial Training at Scale* (ICLR 2020), Section 4.2: clean and
adversarial images come from two domains whose mixture a single BN estimates badly; disentangling them with a BN
per domain recovers robustness. Xie et al., *Adversarial Examples Improve Image Recognition* (AdvProp, CVPR 2020)
and Mei et al., *Fast AdvProp* (ICLR 2022) use the same structure to improve clean accuracy instead.

Each model is timm's `ResNet` with `MixtureBatchNorm2d` wherever timm puts a BN (stem, blocks, downsample). The
main BN keys are timm's, so ``branch_state_dict(sd, 'clean' | 'adv')`` loads strictly into the plain architecture
named by `base_architecture`, e.g. ``mbn_resnet50 -> resnet50``. Pick the branch a forward uses with
``timm_advnorm.layers.route``.

Every entrypoint takes ``inference_branch='clean' | 'adv'`` (default ``clean``): the route the model runs on outside
any ``route`` block. A published whole model records it in ``config.json``'s ``model_args``, so that
``timm.create_model('hf-hub:org/name', pretrained=True)`` returns it routed to the branch its publisher chose.
"""
from functools import partial
from typing import Any, Optional

import torch
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model, split_model_name_tag
from timm.models.resnet import BasicBlock, Bottleneck, ResNet

from ..layers import MixtureBatchNorm2d
from ..layers.branch_notice import notice_default_branch
from ..layers.routing import check_inference_branch, set_inference_branch
from ._cfg import XIE_YUILLE_2020, resnet_cfg
from ._tiny import TINY_CFG, TINY_RESNET_ARGS
from .deep_resnet import deep_resnet_layers

__all__ = ['MixtureBNResNet', 'base_architecture']

# Plain-BN architecture that each model's exported branches load into (see `base_architecture`).
_BASE_ARCHITECTURES = {
    'mbn_resnet18': 'resnet18',
    'mbn_resnet26': 'resnet26',
    'mbn_resnet34': 'resnet34',
    'mbn_resnet50': 'resnet50',
    'mbn_resnet101': 'resnet101',
    'mbn_resnet152': 'resnet152',
    'mbn_resnet200': 'resnet200',
    'mbn_resnet338': 'resnet338',
    'mbn_resnet518': 'resnet518',
    'mbn_resnet638': 'resnet638',
    'test_mbn_resnet': 'test_resnet',
}


def base_architecture(name: str) -> str:
    """The plain-BN timm architecture whose weights a branch of mixture-BN model `name` loads into.

    Args:
        name: A mixture-BN model name, optionally with a pretrained tag (``mbn_resnet50.tag``).

    Returns:
        The registered plain architecture name, without tag: ``mbn_resnet50 -> resnet50``.

    Raises:
        ValueError: `name` is not one of our mixture-BN models.
    """
    arch, _ = split_model_name_tag(name)
    if arch not in _BASE_ARCHITECTURES:
        raise ValueError(f'{name!r} has no plain-BN base architecture; known: {sorted(_BASE_ARCHITECTURES)}.')
    return _BASE_ARCHITECTURES[arch]


class MixtureBNResNet(ResNet):
    """timm's `ResNet` whose adversarial BN branch starts as an exact copy of the clean one.

    `ResNet.init_weights` zero-initialises the last BN gamma of each block, on the clean branch only (it is the
    module's own weight); copying clean to adversarial afterwards gives both branches the same start, so a fresh
    model computes the same function on every route. Runs inside ``__init__``, before any pretrained weights load.
    """

    @torch.jit.ignore
    def init_weights(self, zero_init_last: bool = True) -> None:
        super().init_weights(zero_init_last=zero_init_last)
        for module in self.modules():
            if isinstance(module, MixtureBatchNorm2d):
                module.copy_clean_to_adv()


def _create_mbn_resnet(variant: str, pretrained: bool = False, inference_branch: Optional[str] = None,
                       **kwargs: Any) -> MixtureBNResNet:
    """Build `variant`, routed to `inference_branch` (``clean`` or ``adv``; default ``clean``, and the model says
    so when it loads weights with a trained adversarial branch) outside any ``route`` block."""
    check_inference_branch(inference_branch or 'clean')  # before any weights are downloaded
    model = build_model_with_cfg(MixtureBNResNet, variant, pretrained, norm_layer=MixtureBatchNorm2d, **kwargs)
    set_inference_branch(model, inference_branch or 'clean')
    return model if inference_branch else notice_default_branch(model)


_cfg = partial(resnet_cfg, XIE_YUILLE_2020)

# No released weights yet: untagged cfgs only, no hub ids.
default_cfgs = generate_default_cfgs({
    'mbn_resnet18': _cfg(),
    'mbn_resnet26': _cfg(),
    'mbn_resnet34': _cfg(),
    'mbn_resnet50': _cfg(),
    'mbn_resnet101': _cfg(),
    'mbn_resnet152': _cfg(),
    'mbn_resnet200': _cfg(),
    'mbn_resnet338': _cfg(),
    'mbn_resnet518': _cfg(),
    'mbn_resnet638': _cfg(),
    'test_mbn_resnet': _cfg(**TINY_CFG),
})


@register_model
def mbn_resnet18(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-18 with mixture BN."""
    model_args = dict(block=BasicBlock, layers=(2, 2, 2, 2))
    return _create_mbn_resnet('mbn_resnet18', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet26(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-26 with mixture BN."""
    model_args = dict(block=Bottleneck, layers=(2, 2, 2, 2))
    return _create_mbn_resnet('mbn_resnet26', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet34(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-34 with mixture BN."""
    model_args = dict(block=BasicBlock, layers=(3, 4, 6, 3))
    return _create_mbn_resnet('mbn_resnet34', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet50(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-50 with mixture BN."""
    model_args = dict(block=Bottleneck, layers=(3, 4, 6, 3))
    return _create_mbn_resnet('mbn_resnet50', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet101(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-101 with mixture BN."""
    model_args = dict(block=Bottleneck, layers=(3, 4, 23, 3))
    return _create_mbn_resnet('mbn_resnet101', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet152(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-152 with mixture BN, the baseline network of Xie & Yuille."""
    model_args = dict(block=Bottleneck, layers=(3, 8, 36, 3))
    return _create_mbn_resnet('mbn_resnet152', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet200(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-200 with mixture BN."""
    model_args = dict(block=Bottleneck, layers=(3, 24, 36, 3))
    return _create_mbn_resnet('mbn_resnet200', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet338(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-338 with mixture BN, blocks (3, 42, 64, 3) as `resnet338`."""
    model_args = dict(block=Bottleneck, layers=deep_resnet_layers(338))
    return _create_mbn_resnet('mbn_resnet338', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet518(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-518 with mixture BN, blocks (3, 66, 100, 3) as `resnet518`."""
    model_args = dict(block=Bottleneck, layers=deep_resnet_layers(518))
    return _create_mbn_resnet('mbn_resnet518', pretrained, **dict(model_args, **kwargs))


@register_model
def mbn_resnet638(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """ResNet-638 with mixture BN, blocks (3, 82, 124, 3) as `resnet638`."""
    model_args = dict(block=Bottleneck, layers=deep_resnet_layers(638))
    return _create_mbn_resnet('mbn_resnet638', pretrained, **dict(model_args, **kwargs))


@register_model
def test_mbn_resnet(pretrained: bool = False, **kwargs: Any) -> MixtureBNResNet:
    """Tiny mixture-BN ResNet for tests (timm's `test_resnet` layout, ~0.37M parameters, 32x32 input)."""
    return _create_mbn_resnet('test_mbn_resnet', pretrained, **dict(TINY_RESNET_ARGS, **kwargs))
