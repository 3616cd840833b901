"""Registered model entrypoints; importing this package registers them with timm.

* ``mbn_resnet{18,26,34,50,101,152,200,338,518,638}``: mixture BN (`mbn_resnet.py`);
* ``resnet{338,518,638}``: very deep plain-BN ResNets (`deep_resnet.py`);
* ``gn_resnet{26,50,152}``, ``in_resnet{26,50}``: group and instance norm (`norm_resnet.py`);
* ``nfr_resnet{152,200,338,518,638}``: deep normalizer-free ResNets (`nf_deep_resnet.py`);
* ``robust_resnet50.<tag>``: the MadryLab robust ImageNet ResNet-50s from the Hugging Face Hub (`robust_resnet.py`);
* tiny models for tests: ``test_mbn_resnet``, ``test_gn_resnet``, ``test_in_resnet``, ``test_nfr_resnet``;
* a tiny family in which only the normalization differs, for the paper studies: ``tiny_{bn,mbn,gn,in,nf}_resnet``;
* Galloway et al.'s MNIST models: ``galloway_mlp``, ``galloway_bn_mlp``, ``galloway_linear`` (`galloway_mlp.py`).
"""
from . import deep_resnet, mbn_resnet, nf_deep_resnet, norm_resnet, robust_resnet  # noqa: F401  (registration)
from . import galloway_mlp, tiny_norm_family  # noqa: F401  (registration)
from .deep_resnet import bottleneck_resnet_depth, deep_resnet_layers
from .mbn_resnet import MixtureBNResNet, base_architecture
from .nf_deep_resnet import nf_resnet_cfg
from .norm_resnet import AffineInstanceNorm2d

__all__ = [
    'AffineInstanceNorm2d', 'MixtureBNResNet', 'base_architecture', 'bottleneck_resnet_depth', 'deep_resnet_layers',
    'nf_resnet_cfg',
]
