"""The robust data augmentations NoFrost* trains on next to adversarial examples (Wang et al., ICML 2022, §3.2).

* `create_tda_transform`: texture-debiased augmentation (Hermann et al., NeurIPS 2020), a per-image training
  transform composable with timm's;
* `DeepAugment`: images through a pretrained CAE or EDSR network with randomly distorted weights and activations
  (Hendrycks et al., ICCV 2021), per batch on the fly;
* `generate_deepaugment_folder` (command ``timm-advnorm-deepaugment``): the same offline, writing an
  augmented copy of an image folder as the original scripts do.
"""
from .deepaugment import NETS, DeepAugment, build_net, load_deepaugment_weights, perturb_weights
from .deepaugment_nets import CAE, EDSR, DeepAugmentRng
from .generate import GenerationSummary, generate_deepaugment_folder
from .tda import TDA_CROP_SCALE, blur_kernel_size, color_distortion, create_tda_transform

__all__ = ['CAE', 'EDSR', 'NETS', 'TDA_CROP_SCALE', 'DeepAugment', 'DeepAugmentRng', 'GenerationSummary',
           'blur_kernel_size', 'build_net', 'color_distortion', 'create_tda_transform', 'generate_deepaugment_folder',
           'load_deepaugment_weights', 'perturb_weights']

