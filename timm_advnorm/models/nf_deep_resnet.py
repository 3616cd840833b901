"""Deep normalizer-free ResNets (``nfr_`` prefix) beside timm's ``nf_resnet26/50/101``.

Wang et al., *Removing Batch Normalization Boosts Adversarial Training* (NoFrost, ICML 2022) train NF-ResNets
(Brock et al., *Characterizing signal propagation to close the performance gap in unnormalized ResNets*, ICLR 2021)
adversarially: with no normalization there is no clean/adversarial statistics mixture to get wrong. Xie & Yuille
(ICLR 2020) find robustness keeps growing with depth. These models carry timm's NF-ResNet to ResNet-152 and beyond,
with the same stage splits as the BN models (`deep_resnet_layers`). NoFrost's released code trains them without
gradient clipping; timm's ``--clip-mode agc`` (Brock et al.) is available.

The ``nfr_`` prefix keeps clear of timm's ``nf_`` namespace, where a later timm may register ``nf_resnet152``.
"""
from typing import Any, Dict, Tuple

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.nfnet import NfCfg, NormFreeNet

from ._cfg import NOFROST
from .deep_resnet import deep_resnet_layers

__all__ = ['nf_resnet_cfg']


def nf_resnet_cfg(
        depths: Tuple[int, ...],
        channels: Tuple[int, ...] = (256, 512, 1024, 2048),
        stem_chs: int = 64,
) -> NfCfg:
    """The configuration of timm's ``nf_resnet*`` models (7x7 stem and max pool, bottleneck ratio 1/4, ReLU)."""
    return NfCfg(
        depths=depths, channels=channels, stem_type='7x7_pool', stem_chs=stem_chs, bottle_ratio=0.25, act_layer='relu')


_MODEL_CFGS = {
    'nfr_resnet152': nf_resnet_cfg(depths=(3, 8, 36, 3)),
    'nfr_resnet200': nf_resnet_cfg(depths=(3, 24, 36, 3)),
    'nfr_resnet338': nf_resnet_cfg(depths=deep_resnet_layers(338)),
    'nfr_resnet518': nf_resnet_cfg(depths=deep_resnet_layers(518)),
    'nfr_resnet638': nf_resnet_cfg(depths=deep_resnet_layers(638)),
    'test_nfr_resnet': nf_resnet_cfg(depths=(1, 1, 1, 1), channels=(32, 64, 96, 128), stem_chs=16),
}


def _create_nf_deep_resnet(variant: str, pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    return build_model_with_cfg(
        NormFreeNet, variant, pretrained, model_cfg=_MODEL_CFGS[variant],
        feature_cfg=dict(flatten_sequential=True), **kwargs)


def _cfg(**kwargs: Any) -> Dict[str, Any]:
    return {
        'url': '', 'num_classes': 1000, 'input_size': (3, 224, 224), 'pool_size': (7, 7),
        'crop_pct': 0.9, 'interpolation': 'bicubic', 'mean': IMAGENET_DEFAULT_MEAN, 'std': IMAGENET_DEFAULT_STD,
        'first_conv': 'stem.conv', 'classifier': 'head.fc', 'license': 'apache-2.0',
        'paper_name': NOFROST, 'paper_ids': 'arXiv:2207.01156',
        **kwargs,
    }


# No released weights yet: untagged cfgs only, no hub ids.
default_cfgs = generate_default_cfgs({
    'nfr_resnet152': _cfg(),
    'nfr_resnet200': _cfg(),
    'nfr_resnet338': _cfg(),
    'nfr_resnet518': _cfg(),
    'nfr_resnet638': _cfg(),
    'test_nfr_resnet': _cfg(input_size=(3, 32, 32), pool_size=(1, 1), crop_pct=1.0),
})


@register_model
def nfr_resnet152(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Normalizer-free ResNet-152."""
    return _create_nf_deep_resnet('nfr_resnet152', pretrained, **kwargs)


@register_model
def nfr_resnet200(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Normalizer-free ResNet-200."""
    return _create_nf_deep_resnet('nfr_resnet200', pretrained, **kwargs)


@register_model
def nfr_resnet338(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Normalizer-free ResNet-338, blocks (3, 42, 64, 3)."""
    return _create_nf_deep_resnet('nfr_resnet338', pretrained, **kwargs)


@register_model
def nfr_resnet518(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Normalizer-free ResNet-518, blocks (3, 66, 100, 3)."""
    return _create_nf_deep_resnet('nfr_resnet518', pretrained, **kwargs)


@register_model
def nfr_resnet638(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Normalizer-free ResNet-638, blocks (3, 82, 124, 3)."""
    return _create_nf_deep_resnet('nfr_resnet638', pretrained, **kwargs)


@register_model
def test_nfr_resnet(pretrained: bool = False, **kwargs: Any) -> NormFreeNet:
    """Tiny normalizer-free ResNet for tests (one block per stage, 32x32 input)."""
    return _create_nf_deep_resnet('test_nfr_resnet', pretrained, **kwargs)
