"""timm's data flags as the keyword arguments of timm's data factories, for `train_adv.py`.

Augmentation (``--aa``, ``--reprob``, ``--color-jitter``, flips, crops, ``--aug-repeats``) is done by the training
loader on the clean images, before any attack: the methods attack what the loader gives them, and Fast AdvProp still
mixes (Mixup/CutMix) only its clean rows inside its task. The validation loaders use the model's preprocessing,
overridden by ``--input-size``, ``--crop-pct`` and ``--interpolation``.
"""
import argparse
from typing import Any, Dict, Optional

from timm.data import Mixup

__all__ = ['data_config_args', 'dataset_kwargs', 'train_loader_kwargs', 'create_mixup']


def data_config_args(args: argparse.Namespace) -> Dict[str, Any]:
    """What `timm.data.resolve_data_config` reads from the flags: sizes, crop, interpolation, mean and std."""
    return dict(img_size=args.img_size, input_size=args.input_size, crop_pct=args.crop_pct,
                interpolation=args.interpolation, mean=args.mean, std=args.std)


def dataset_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """`timm.data.create_dataset` options of every split: class map, download, remote code and the image and label
    fields of Hugging Face and WebDataset sources (given only when set: folder readers take no such field)."""
    kwargs: Dict[str, Any] = dict(class_map=args.class_map, download=args.dataset_download,
                                  trust_remote_code=args.dataset_trust_remote_code)
    fields = dict(input_key=args.input_key, target_key=args.target_key)
    kwargs.update((key, value) for key, value in fields.items() if value is not None)
    return kwargs


def train_loader_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """`timm.data.create_loader` augmentation options of the training loader, as timm's ``train.py`` passes them.

    Raises:
        ValueError: ``--aug-repeats`` without distributed training (timm's repeated-augmentation sampler shards the
            repeats over processes).
    """
    if args.aug_repeats and not args.distributed:
        raise ValueError('--aug-repeats needs distributed training (torchrun): its sampler spreads the repeats of '
                         'each image over the processes')
    return dict(
        no_aug=args.no_aug, re_prob=args.reprob, re_mode=args.remode, re_count=args.recount,
        train_crop_mode=args.train_crop_mode, scale=args.scale, ratio=args.ratio, hflip=args.hflip, vflip=args.vflip,
        color_jitter=args.color_jitter, color_jitter_prob=args.color_jitter_prob, grayscale_prob=args.grayscale_prob,
        gaussian_blur_prob=args.gaussian_blur_prob, auto_augment=args.aa, num_aug_repeats=args.aug_repeats,
        interpolation=args.train_interpolation, worker_seeding=args.worker_seeding)


def create_mixup(args: argparse.Namespace, num_classes: int) -> Optional[Mixup]:
    """timm's Mixup/CutMix when ``--mixup``, ``--cutmix`` or ``--cutmix-minmax`` asks for it, else None."""
    if not (args.mixup > 0 or args.cutmix > 0 or args.cutmix_minmax is not None):
        return None
    return Mixup(mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,
                 prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,
                 label_smoothing=args.smoothing, num_classes=num_classes)
