"""Pretrained-config defaults of our timm-`ResNet` families, and the papers they come from."""
from typing import Any, Dict

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

XIE_YUILLE_2020 = 'Intriguing Properties of Adversarial Training at Scale'
NOFROST = 'Removing Batch Normalization Boosts Adversarial Training'


def resnet_cfg(paper_name: str, **kwargs: Any) -> Dict[str, Any]:
    """Config of a timm `ResNet` (224px, bilinear, ImageNet mean/std) without released weights: no url, no hub id."""
    return {
        'url': '', 'num_classes': 1000, 'input_size': (3, 224, 224), 'pool_size': (7, 7),
        'crop_pct': 0.875, 'interpolation': 'bilinear', 'mean': IMAGENET_DEFAULT_MEAN, 'std': IMAGENET_DEFAULT_STD,
        'first_conv': 'conv1', 'classifier': 'fc', 'license': 'apache-2.0', 'paper_name': paper_name,
        **kwargs,
    }
