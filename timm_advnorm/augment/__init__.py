"""The robust data augmentations NoFrost* trains on next to adversarial examples (Wang et al., ICML 2022, §3.2).

* `create_tda_transform`: texture-debiased augmentation (Hermann et al., NeurIPS 2020), a per-image training
  transform composable with timm's;
* `DeepAugment`: images through a pretrained CAE or EDSR network with randomly distorted weights and activations
  (Hendrycks et al., ICCV 2021), per batch on the fly;
* `generate_deepaugment_folder` (command ``python -m timm_advnorm.augment.generate``): the same offline, writing an
  augmented copy of an image folder as the original scripts do.
"""
from typing import Any

from .deepaugment import NETS, DeepAugment, build_net, load_deepaugment_weights, perturb_weights
from .deepaugment_nets import CAE, EDSR, DeepAugmentRng
from .tda import TDA_CROP_SCALE, blur_kernel_size, color_distortion, create_tda_transform

__all__ = ['CAE', 'EDSR', 'NETS', 'TDA_CROP_SCALE', 'DeepAugment', 'DeepAugmentRng', 'GenerationSummary',
           'blur_kernel_size', 'build_net', 'color_distortion', 'create_tda_transform', 'generate_deepaugment_folder',
           'load_deepaugment_weights', 'perturb_weights']

_FROM_GENERATE = ('GenerationSummary', 'generate_deepaugment_folder')


def __getattr__(name: str) -> Any:
    """`generate`'s names, imported on first use: importing the command's module here would make
    ``python -m timm_advnorm.augment.generate`` warn that it runs a module already imported."""
    if name in _FROM_GENERATE:
        from . import generate
        return getattr(generate, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
