"""Texture-debiased augmentation (TDA): the training transform NoFrost* uses against texture bias.

Hermann, Chen & Kornblith (*The Origins and Prevalence of Texture Bias in Convolutional Neural Networks*, NeurIPS
2020, §5) find that less aggressive random crops and simple naturalistic augmentations (colour distortion, blur,
noise) make ImageNet models classify by shape more often. NoFrost* (Wang et al., ICML 2022, §3.2) trains on TDA
images next to clean, adversarial and DeepAugment ones; its released code (amazon-science/normalizer-free-robust-
training, ``dataloaders/imagenet.py``, ``imagenet_texture_debias_dataset`` and ``get_color_distortion``) builds TDA
as: random-resized crop with minimum area 0.64, horizontal flip, then with probability 0.5 SimCLR's colour distortion
of strength 1 (Chen et al., *A Simple Framework for Contrastive Learning*, ICML 2020, Appendix A; google-research/
simclr ``data_util.py``: colour jitter 0.8·s/0.8·s/0.8·s/0.2·s applied with probability 0.8, then grayscale with
probability 0.2). `create_tda_transform`'s defaults are exactly that. SimCLR's Gaussian blur (probability 0.5 in
SimCLR, σ ~ U(0.1, 2.0), kernel 10% of the image side) is available with ``blur_prob``; NoFrost's code does not
apply it, so it is off by default.

Like timm's training transforms, the transform takes a PIL image (what timm's datasets yield); every op is a
torchvision transform, which also takes a CHW tensor. All randomness comes from torch's global RNG, which
DataLoader seeds per worker, so a seeded run is reproducible.
"""
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.data.transforms import MaybePILToTensor, MaybeToTensor, str_to_interp_mode
from torchvision import transforms

__all__ = ['TDA_CROP_SCALE', 'blur_kernel_size', 'color_distortion', 'create_tda_transform']

#: Minimum crop area of NoFrost's TDA (``imagenet_texture_debias_dataset(min_crop_scale=0.64)``), against the
#: usual 0.08: the "less aggressive random crops" of Hermann et al. §5.
TDA_CROP_SCALE = (0.64, 1.0)


def color_distortion(strength: float = 1.0, jitter_prob: float = 0.8, grayscale_prob: float = 0.2) -> Callable:
    """SimCLR's colour distortion (Chen et al. 2020, Appendix A), as NoFrost's ``get_color_distortion(s)``.

    Args:
        strength: s; brightness, contrast and saturation jitter 0.8·s, hue jitter 0.2·s (0 leaves out the jitter).
        jitter_prob: Probability of the colour jitter (SimCLR: 0.8).
        grayscale_prob: Probability of converting to grayscale, after the jitter (SimCLR: 0.2).
    """
    ops: List[Callable] = []
    if strength > 0 and jitter_prob > 0:
        jitter = transforms.ColorJitter(0.8 * strength, 0.8 * strength, 0.8 * strength, 0.2 * strength)
        ops.append(transforms.RandomApply([jitter], p=jitter_prob))
    if grayscale_prob > 0:
        ops.append(transforms.RandomGrayscale(p=grayscale_prob))
    return transforms.Compose(ops)


def blur_kernel_size(height: int) -> int:
    """SimCLR's blur kernel: 10% of the image height, made odd (``radius = (height // 10) // 2``, size
    ``2·radius + 1``; google-research/simclr ``random_blur``/``gaussian_blur``)."""
    return 2 * (height // 10 // 2) + 1


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f'{name} must be a probability in [0, 1], got {value}')


def create_tda_transform(
        img_size: Union[int, Tuple[int, int]] = 224,
        *,
        scale: Optional[Tuple[float, float]] = TDA_CROP_SCALE,
        ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: str = 'bilinear',
        hflip: float = 0.5,
        color_prob: float = 0.5,
        color_strength: float = 1.0,
        jitter_prob: float = 0.8,
        grayscale_prob: float = 0.2,
        blur_prob: float = 0.0,
        blur_sigma: Tuple[float, float] = (0.1, 2.0),
        mean: Sequence[float] = IMAGENET_DEFAULT_MEAN,
        std: Sequence[float] = IMAGENET_DEFAULT_STD,
        use_prefetcher: bool = False,
        normalize: bool = True,
) -> transforms.Compose:
    """The TDA training transform: crop, flip, colour distortion, optional blur, then timm's tensor conversion.

    Each op can be switched off: ``scale=None`` resizes the shorter side and centre-crops instead of a random crop;
    a probability of 0 (``hflip``, ``color_prob``, ``blur_prob``) leaves its op out.

    Args:
        img_size: Output size, an int or (height, width).
        scale: Crop area range of the random-resized crop (NoFrost's TDA: (0.64, 1.0); timm's usual: (0.08, 1.0)).
        ratio: Crop aspect-ratio range (torchvision's default, which NoFrost keeps).
        interpolation: Resize interpolation, a timm name (torchvision's default bilinear, which NoFrost keeps).
        hflip: Probability of a horizontal flip (NoFrost: 0.5).
        color_prob: Probability of the whole colour distortion (NoFrost: ``RandomApply(..., p=0.5)``).
        color_strength: SimCLR strength s of the colour jitter (NoFrost: 1.0).
        jitter_prob: Probability of the jitter inside the colour distortion (SimCLR: 0.8).
        grayscale_prob: Probability of grayscale inside the colour distortion (SimCLR: 0.2).
        blur_prob: Probability of a Gaussian blur after the colour distortion (SimCLR: 0.5; NoFrost: none).
        blur_sigma: Range of the blur's σ in pixels, drawn uniformly (SimCLR: (0.1, 2.0)).
        mean: Normalization mean (timm's ImageNet default, as NoFrost).
        std: Normalization std.
        use_prefetcher: End with a uint8 tensor, as timm's transforms do for its GPU prefetcher (which normalizes).
        normalize: End with a normalized float tensor; False ends with a uint8 tensor, as timm's transforms.

    Returns:
        A torchvision `Compose` taking a PIL image (or CHW tensor) and returning a (3, H, W) tensor.
    """
    for name, value in (('hflip', hflip), ('color_prob', color_prob), ('jitter_prob', jitter_prob),
                        ('grayscale_prob', grayscale_prob), ('blur_prob', blur_prob)):
        _check_probability(name, value)
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    interp = str_to_interp_mode(interpolation)
    if scale is None:
        ops: List[Callable] = [transforms.Resize(min(size), interpolation=interp), transforms.CenterCrop(size)]
    else:
        ops = [transforms.RandomResizedCrop(size, scale=tuple(scale), ratio=tuple(ratio), interpolation=interp)]
    if hflip > 0:
        ops.append(transforms.RandomHorizontalFlip(p=hflip))
    if color_prob > 0:
        ops.append(transforms.RandomApply([color_distortion(color_strength, jitter_prob, grayscale_prob)],
                                          p=color_prob))
    if blur_prob > 0:
        blur = transforms.GaussianBlur(blur_kernel_size(size[0]), sigma=tuple(blur_sigma))
        ops.append(transforms.RandomApply([blur], p=blur_prob))
    if use_prefetcher or not normalize:
        ops.append(MaybePILToTensor())
    else:
        ops += [MaybeToTensor(), transforms.Normalize(mean=torch.tensor(mean), std=torch.tensor(std))]
    return transforms.Compose(ops)
