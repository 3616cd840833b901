"""timm's data flags as the keyword arguments of timm's data factories, for `train_adv.py`.

Augmentation (``--aa``, ``--reprob``, ``--color-jitter``, flips, crops, ``--aug-repeats``) is done by the training
loader on the clean images, before any attack: the methods attack what the loader gives them, and Fast AdvProp still
mixes (Mixup/CutMix) only its clean rows inside its task. The validation loaders use the model's preprocessing,
overridden by ``--input-size``, ``--crop-pct`` and ``--interpolation``.
"""
from typing import Any, Dict, Optional

from timm.data import Mixup

from .options import AugmentOptions, DataOptions

__all__ = ['data_config_args', 'dataset_kwargs', 'train_loader_kwargs', 'create_mixup']


def data_config_args(data: DataOptions) -> Dict[str, Any]:
    """What `timm.data.resolve_data_config` reads from the flags: sizes, crop, interpolation, mean and std."""
    return dict(img_size=data.img_size, input_size=data.input_size, crop_pct=data.crop_pct,
                interpolation=data.interpolation, mean=data.mean, std=data.std)


def dataset_kwargs(data: DataOptions) -> Dict[str, Any]:
    """`timm.data.create_dataset` options of every split: class map, download, remote code and the image and label
    fields of Hugging Face and WebDataset sources (given only when set: folder readers take no such field)."""
    kwargs: Dict[str, Any] = dict(class_map=data.class_map, download=data.dataset_download,
                                  trust_remote_code=data.dataset_trust_remote_code)
    fields = dict(input_key=data.input_key, target_key=data.target_key)
    kwargs.update((key, value) for key, value in fields.items() if value is not None)
    return kwargs


def train_loader_kwargs(augment: AugmentOptions, distributed: bool) -> Dict[str, Any]:
    """`timm.data.create_loader` augmentation options of the training loader, as timm's ``train.py`` passes them.

    Raises:
        ValueError: ``--aug-repeats`` without distributed training (timm's repeated-augmentation sampler shards the
            repeats over processes).
    """
    if augment.aug_repeats and not distributed:
        raise ValueError('--aug-repeats needs distributed training (torchrun): its sampler spreads the repeats of '
                         'each image over the processes')
    a = augment
    return dict(
        no_aug=a.no_aug, re_prob=a.reprob, re_mode=a.remode, re_count=a.recount, train_crop_mode=a.train_crop_mode,
        scale=a.scale, ratio=a.ratio, hflip=a.hflip, vflip=a.vflip, color_jitter=a.color_jitter,
        color_jitter_prob=a.color_jitter_prob, grayscale_prob=a.grayscale_prob,
        gaussian_blur_prob=a.gaussian_blur_prob, auto_augment=a.aa, num_aug_repeats=a.aug_repeats,
        interpolation=a.train_interpolation, worker_seeding=a.worker_seeding)


def create_mixup(augment: AugmentOptions, num_classes: int) -> Optional[Mixup]:
    """timm's Mixup/CutMix when ``--mixup``, ``--cutmix`` or ``--cutmix-minmax`` asks for it, else None."""
    if not (augment.mixup > 0 or augment.cutmix > 0 or augment.cutmix_minmax is not None):
        return None
    return Mixup(mixup_alpha=augment.mixup, cutmix_alpha=augment.cutmix, cutmix_minmax=augment.cutmix_minmax,
                 prob=augment.mixup_prob, switch_prob=augment.mixup_switch_prob, mode=augment.mixup_mode,
                 label_smoothing=augment.smoothing, num_classes=num_classes)
