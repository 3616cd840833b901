"""Feature Denoising's tensorpack ResNets (Xie et al., CVPR 2019) to timm's ``resnet50/101/152``.

github.com/facebookresearch/ImageNet-Adversarial-Training releases ``R152.npz``: tensorpack variables of the
adversarially trained ResNet-152 baseline that Xie & Yuille (ICLR 2020) build on. The layout
(``resnet_model.py``, ``nets.py``):

* ``conv0/W`` (7x7, stride 2, 64) + ``conv0/bn/*``, max pool 3x3 stride 2;
* ``group{0..3}/block{i}/conv{1,2,3}/W`` + ``/bn/*``: bottleneck 1x1, 3x3 (carrying the stride, as timm), 1x1;
  ``convshortcut/W`` + ``/bn/*`` where the channel count changes (timm's ``downsample.0/1``);
* ``linear/W`` (in, out) and ``linear/b``;
* BN variables ``gamma``, ``beta``, ``mean/EMA``, ``variance/EMA`` (tensorpack defaults: epsilon 1e-5, momentum
  0.9 = torch's 0.1, so timm's BN settings match); convolutions have no bias and are stored HWIO.

Tensorpack's ``dump-model-params.py`` writes names with a ``:0`` suffix; both spellings are read. Training-only
variables (optimizer slots, ``global_step``, ``learning_rate``, ``EMA/`` summaries) are skipped; anything else
that does not map fails the conversion, as does anything timm expects and the file lacks.

Input: the model saw BGR images scaled to [-1, 1] (``image * 2/255 - 1``). The converted first convolution takes
RGB (its input channels are reversed) and the config sets mean = std = 0.5, which is the same scaling; evaluation
resized the short side to 256 (bicubic) and center-cropped 224.

Padding: TensorFlow's ``SAME`` padding of the stride-2 layers (stem convolution, max pool, stride-2 3x3
convolutions) is asymmetric on even inputs, where PyTorch pads symmetrically, shifting their sampling grid by one
pixel. Stock timm ``resnet152`` loads the weights but computes slightly different outputs; `use_tf_same_padding`
swaps those layers for timm's ``Conv2dSame``/``MaxPool2dSame`` (same state-dict keys) and reproduces the original
exactly. The export records this, and ``timm_advnorm.hub.create_model_from_name_or_checkpoint`` applies it.
"""
import logging
import re
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from ..layers.tf_same_padding import use_tf_same_padding
from ..messages import counted_names
from ..weights.checkpoint import file_format, zip_members
from .common import create_target, load_exactly, provenance, save_converted

__all__ = [
    'FORMAT', 'PREPROCESSING', 'read_tensorpack_npz', 'tensorpack_resnet_state_dict', 'tensorpack_resnet_layers',
    'use_tf_same_padding', 'convert_tensorpack_resnet',
]

_logger = logging.getLogger(__name__)

FORMAT = 'tensorpack-resnet'
PREPROCESSING = dict(
    input_size=(3, 224, 224), crop_pct=0.875, interpolation='bicubic', mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
    license='cc-by-nc-4.0', paper_name='Feature Denoising for Improving Adversarial Robustness',
    origin_url='https://github.com/facebookresearch/ImageNet-Adversarial-Training')
_RESNETS = {(3, 4, 6, 3): 'resnet50', (3, 4, 23, 3): 'resnet101', (3, 8, 36, 3): 'resnet152'}
_BN_NAMES = {'gamma': 'weight', 'beta': 'bias', 'mean/EMA': 'running_mean', 'variance/EMA': 'running_var'}
_BLOCK = re.compile(r'group(\d+)/block(\d+)/(conv[123]|convshortcut)/(W|bn/.+)')
_STEM = re.compile(r'conv0/(W|bn/.+)')
_TRAINING_ONLY = re.compile(
    r'(global_step|learning_rate)$|^EMA/|^AccumGrad|^apply_gradients|/(Momentum|Adam|Adam_1|RMSProp|RMSProp_1|'
    r'Adagrad|Adadelta|Adadelta_1|AccumGrad)$')
_DENOISE = re.compile(r'_denoise/|/non_local/')
# What a file that is not an npz archive is instead, by its `file_format`.
_NOT_NPZ = {'torch-pickle': 'a torch.save file', 'safetensors': 'a safetensors file',
            'empty': 'an empty file (0 bytes)', 'text': 'a text file', 'unknown': 'a file of unknown format'}

Arrays = Mapping[str, np.ndarray]
StateDict = Dict[str, torch.Tensor]


def _check_npz(path: Path) -> None:
    """Raise unless `path` is a whole numpy ``.npz`` archive. ``np.load`` takes any zip for one, a torch.save
    checkpoint included, and finds no arrays in it: the conversion would then fail for the wrong reason."""
    if not path.is_file():
        raise FileNotFoundError(f'File not found: {path}')
    kind = file_format(path)
    if kind != 'zip':
        raise ValueError(f'{path}: not an npz archive (as tensorpack writes): {_NOT_NPZ[kind]}')
    names = zip_members(path)
    if not names or not all(name.endswith('.npy') for name in names):
        what = 'a torch.save file' if any(name.endswith('data.pkl') for name in names) else 'a zip of other files'
        raise ValueError(f'{path}: not an npz archive (as tensorpack writes): {what}')


def read_tensorpack_npz(path: Union[str, Path]) -> Dict[str, np.ndarray]:
    """Variables of a tensorpack ``.npz``, names without the ``:0`` tensor suffix, training-only ones dropped.

    Raises:
        FileNotFoundError: No file at `path`.
        ValueError: The file is not an npz archive (e.g. a torch checkpoint), or a truncated or damaged one.
    """
    _check_npz(Path(path))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name[:-2] if name.endswith(':0') else name: npz[name] for name in npz.files}
    skipped = [name for name in arrays if _TRAINING_ONLY.search(name)]
    if skipped:
        _logger.info(f'Skipping {len(skipped)} training-only variables (optimizer slots, step counters).')
    return {name: value for name, value in arrays.items() if name not in skipped}


def _conv(array: np.ndarray) -> torch.Tensor:
    """HWIO (TensorFlow) to OIHW (PyTorch)."""
    return torch.from_numpy(np.ascontiguousarray(array.transpose(3, 2, 0, 1))).float()


def _tensor(module: str, suffix: str, array: np.ndarray, name: str) -> Tuple[str, torch.Tensor]:
    if suffix == 'W':
        return f'{module}.weight', _conv(array)
    variable = suffix[len('bn/'):]
    if variable not in _BN_NAMES:
        raise ValueError(f'Unexpected batch-norm variable {name}.')
    return f'{module}.{_BN_NAMES[variable]}', torch.from_numpy(np.ascontiguousarray(array)).float()


def _timm_name(name: str, array: np.ndarray) -> Tuple[str, torch.Tensor]:
    block = _BLOCK.fullmatch(name)
    if block:
        group, index, layer, suffix = block.groups()
        prefix = f'layer{int(group) + 1}.{index}'
        if layer == 'convshortcut':
            module = f'{prefix}.downsample.0' if suffix == 'W' else f'{prefix}.downsample.1'
        else:
            module = f'{prefix}.{layer}' if suffix == 'W' else f'{prefix}.bn{layer[-1]}'
        return _tensor(module, suffix, array, name)
    stem = _STEM.fullmatch(name)
    if stem:
        module = 'conv1' if stem.group(1) == 'W' else 'bn1'
        key, tensor = _tensor(module, stem.group(1), array, name)
        return key, tensor.flip(1) if key == 'conv1.weight' else tensor  # BGR -> RGB input channels
    if name == 'linear/W':
        return 'fc.weight', torch.from_numpy(np.ascontiguousarray(array.T)).float()
    if name == 'linear/b':
        return 'fc.bias', torch.from_numpy(np.ascontiguousarray(array)).float()
    if _DENOISE.search(name):
        raise ValueError(f'{name} belongs to a feature-denoising block (R152-Denoise, X101-DenoiseAll): those '
                         f'models have no timm equivalent; only the ResNet baselines convert.')
    raise ValueError(f'Unexpected tensorpack variable {name}.')


def tensorpack_resnet_state_dict(arrays: Arrays) -> StateDict:
    """timm ResNet state dict (``conv1``, ``bn1``, ``layerN.M.*``, ``fc``) from tensorpack ResNet variables.

    Raises:
        ValueError: A variable that maps to nothing in a timm ResNet, or a feature-denoising block.
    """
    state_dict = {}
    for name, array in arrays.items():
        key, tensor = _timm_name(name, array)
        if key in state_dict:
            raise ValueError(f'Two variables map to {key} (the second is {name}).')
        state_dict[key] = tensor
    for key in [k for k in state_dict if k.endswith('.running_var')]:
        state_dict[key[:-len('running_var')] + 'num_batches_tracked'] = torch.tensor(0, dtype=torch.long)
    return state_dict


def tensorpack_resnet_layers(arrays: Arrays) -> Tuple[int, ...]:
    """Blocks per group (``(3, 8, 36, 3)`` for R152) of a tensorpack ResNet."""
    blocks = {}
    for name in arrays:
        match = _BLOCK.fullmatch(name)
        if match:
            blocks.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return tuple(len(blocks.get(group, ())) for group in range(4))


def convert_tensorpack_resnet(
        src: Union[str, Path],
        dst: Union[str, Path],
        model_name: Optional[str] = None,
        overwrite: bool = False,
) -> Path:
    """Convert a tensorpack ResNet ``.npz`` (e.g. ``R152.npz``) into an export folder.

    Args:
        src: The released ``.npz``.
        dst: Export folder to write (``config.json`` + ``model.safetensors``).
        model_name: Target architecture, overriding the one detected from the blocks per group.
        overwrite: Replace a non-empty `dst`.

    Raises:
        FileNotFoundError: No file at `src`.
        ValueError: Not a whole npz archive, no tensorpack ResNet in it, an unknown layout, a denoising model, or
            variables that do not map one to one.
    """
    arrays = read_tensorpack_npz(src)
    layers = tensorpack_resnet_layers(arrays)
    if not any(layers):
        raise ValueError(f'{src}: no "group*/block*" variables: not a tensorpack ResNet '
                         f'({counted_names(sorted(arrays), "variable")}).')
    target = model_name or _RESNETS.get(layers)
    if target is None:
        raise ValueError(f'Blocks per group {layers} match no timm ResNet ({sorted(_RESNETS.values())}).')
    state_dict = tensorpack_resnet_state_dict(arrays)
    if 'fc.weight' not in state_dict:
        raise ValueError(f'{src}: no classifier "linear/W".')
    model = load_exactly(create_target(target, PREPROCESSING, state_dict['fc.weight'].shape[0]), state_dict, str(src))
    origin = provenance(src, FORMAT, architecture=target, input='BGR in [-1, 1] (converted to RGB, mean=std=0.5)')
    return save_converted(model, dst, origin, overwrite=overwrite, plugin_config=dict(padding='tf_same'))
