"""The preprocessing a model was trained with travels with it, in its pretrained config.

timm resolves a model's input size, mean/std, interpolation and crop from ``model.pretrained_cfg``. A run that trains
at another size or with other statistics than the registry's (``--img-size 32``, ``--mean``) writes what it used into
that config, which its checkpoints save, so that evaluation, export and publishing preprocess exactly as in training
unless a user overrides a value explicitly.
"""
from typing import Any, List, Mapping, Optional

import torch.nn as nn

__all__ = ['PREPROCESSING_KEYS', 'record_preprocessing', 'explicit_preprocessing', 'model_input_channels',
           'check_input_channels', 'minimum_image_size', 'check_input_size']

#: The `timm.data.resolve_data_config` entries that define preprocessing.
PREPROCESSING_KEYS = ('input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')
# Command-line arguments (timm's names) that override an entry of the resolved data config.
_OVERRIDE_ARGS = ('img_size', 'input_size', 'interpolation', 'mean', 'std', 'crop_pct', 'crop_mode')


def record_preprocessing(model: nn.Module, data_config: Mapping[str, Any]) -> None:
    """Write the resolved training `data_config` into ``model.pretrained_cfg``.

    The registry's test-time entries (``test_input_size``, ``test_crop_pct``) describe the registry's weights at the
    registry's size; they are dropped when training ran at another size, so evaluation uses the trained one.
    """
    cfg = dict(getattr(model, 'pretrained_cfg', None) or {})
    if tuple(cfg.get('input_size') or ()) != tuple(data_config['input_size']):
        cfg.pop('test_input_size', None)
        cfg.pop('test_crop_pct', None)
    cfg.update({key: data_config[key] for key in PREPROCESSING_KEYS if key in data_config})
    model.pretrained_cfg = cfg


def explicit_preprocessing(args: Mapping[str, Any]) -> List[str]:
    """The preprocessing options a user set explicitly (given, not left unset), in timm's argument names."""
    return [key for key in _OVERRIDE_ARGS if args.get(key) not in (None, '', [])]


def model_input_channels(model: nn.Module) -> Optional[int]:
    """The channels `model` takes: its ``in_chans`` where it states them (a model whose first layer sees the image
    flattened, as Galloway et al.'s MLPs), else its first convolution's (``pretrained_cfg['first_conv']``, else the
    first convolution it holds); None for a model without one."""
    in_chans = getattr(model, 'in_chans', None)
    if isinstance(in_chans, int):
        return in_chans
    name = (getattr(model, 'pretrained_cfg', None) or {}).get('first_conv')
    first = None
    if isinstance(name, str):
        try:
            first = model.get_submodule(name)
        except AttributeError:  # a config naming a module this variant does not have
            first = None
    if not isinstance(first, nn.modules.conv._ConvNd):
        first = next((m for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)), None)
    return None if first is None else int(first.in_channels)


def check_input_channels(model: nn.Module, data_config: Mapping[str, Any]) -> None:
    """The resolved input size's channels (``--input-size C H W``) are the model's: another count fails only in
    the first forward, with a shape error that names neither.

    Raises:
        ValueError: The counts differ.
    """
    channels, expected = int(data_config['input_size'][0]), model_input_channels(model)
    if expected is not None and channels != expected:
        raise ValueError(f'the input size {" ".join(map(str, data_config["input_size"]))} (--input-size, else the '
                         f'model\'s) has {channels} channel(s), but the model takes {expected}')


def minimum_image_size(model: nn.Module) -> Optional[int]:
    """The smallest image side `model` takes: the reduction of its stem, the first entry of timm's ``feature_info``
    (a ResNet's stem stride, a ViT's patch size). Below it the stem has less than one pixel of the image to map to
    each output position: the run trains and evaluates on padding.

    The model's total stride (the last reduction) is not the minimum: timm's convolutions pad, so a stride-32
    ResNet computes on 16 px images (the tiny test models do, by design). None for a model that declares no features
    and for one whose every feature has the reduction of its whole input (an MLP that flattens the image, as Galloway
    et al.'s: it takes its own size only, which its first layer checks).
    """
    info = getattr(model, 'feature_info', None)
    entries = getattr(info, 'info', info)  # a features_only model's `FeatureInfo`, else timm's list of dicts
    if not isinstance(entries, (list, tuple)) or not entries or not isinstance(entries[0], Mapping):
        return None
    reductions = [entry.get('reduction') for entry in entries]
    if not all(isinstance(r, int) and r > 0 for r in reductions):
        return None
    side = ((getattr(model, 'pretrained_cfg', None) or {}).get('input_size') or (None,))[-1]
    if len(set(reductions)) == 1 and reductions[0] == side:  # a flattening stem: its reduction is the image
        return None
    return reductions[0]


def check_input_size(model: nn.Module, data_config: Mapping[str, Any]) -> None:
    """The resolved image size (``--img-size``, ``--input-size``, else the model's) is at least the model's minimum
    (`minimum_image_size`): a 1 px image trains and evaluates without an error, on nothing.

    Raises:
        ValueError: A side below the minimum, naming it.
    """
    minimum = minimum_image_size(model)
    height, width = (int(side) for side in data_config['input_size'][-2:])
    if minimum is not None and min(height, width) < minimum:
        name = (getattr(model, 'pretrained_cfg', None) or {}).get('architecture') or 'the model'
        raise ValueError(f'the image size {height}x{width} (--img-size or --input-size, else the model\'s) is below '
                         f'the minimum of {name}, {minimum} px (its stem\'s reduction, timm\'s feature_info); give '
                         f'--img-size {minimum} or more')
