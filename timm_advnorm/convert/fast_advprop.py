"""Fast AdvProp checkpoints (Mei et al., ICLR 2022; github.com/meijieru/fast_advprop) to mixture-BN timm models.

The released training code (``imagenet.py``) builds a torchvision ResNet (its ``net.py``) whose every BN is a
``MixBatchNorm2d``: an ``nn.BatchNorm2d`` for clean images with a child ``aux_bn`` for adversarial ones, wraps it
in (Distributed)DataParallel and saves ``{'epoch', 'state_dict', 'acc', 'best_acc', 'optimizer'}``. Keys therefore
read ``module.layer1.0.bn1.aux_bn.running_mean``, ``module.layer1.0.downsample.1.weight``, ``module.fc.weight``.

timm's ResNet uses torchvision's names (``conv1``/``bn1``, ``layerN.M.convK``/``bnK``, ``downsample.0/1``,
``fc``) and the same stride placement (on the 3x3 convolution), so the conversion drops the ``module.`` prefix and
renames ``aux_bn`` to our ``adv_bn``; every key must map, none may be left over. The target is our
``mbn_<arch>`` (``mbn_resnet50`` for the released ResNet-50), or with ``branch`` the plain timm ``<arch>`` holding
one branch. Fast AdvProp infers on the clean branch. Its images are RGB, normalized with mean = std = 0.5
(inputs in [-1, 1]), evaluated at 224 after a resize to 256 (bilinear): the export's config says so.
"""
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

import timm
import torch

from ..layers import ADV_BN_KEY, branch_state_dict
from ..weights.checkpoint import load_weights_file, strip_wrapper_prefixes
from .common import create_target, load_exactly, provenance, save_converted

__all__ = ['FORMAT', 'PREPROCESSING', 'fast_advprop_state_dict', 'torchvision_resnet_name', 'convert_fast_advprop']

FORMAT = 'fast-advprop'
PREPROCESSING = dict(
    input_size=(3, 224, 224), crop_pct=0.875, interpolation='bilinear', mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
    license='mit', paper_name='Fast AdvProp', origin_url='https://github.com/meijieru/fast_advprop')
_AUX_BN_KEY = 'aux_bn'

# (block, blocks per stage, groups, width per group) of the torchvision ResNets Fast AdvProp's net.py defines.
_TORCHVISION_RESNETS = {
    ('basic', (2, 2, 2, 2), 1, 64): 'resnet18',
    ('basic', (3, 4, 6, 3), 1, 64): 'resnet34',
    ('bottleneck', (3, 4, 6, 3), 1, 64): 'resnet50',
    ('bottleneck', (3, 4, 23, 3), 1, 64): 'resnet101',
    ('bottleneck', (3, 8, 36, 3), 1, 64): 'resnet152',
    ('bottleneck', (3, 4, 6, 3), 32, 4): 'resnext50_32x4d',
    ('bottleneck', (3, 4, 23, 3), 32, 8): 'resnext101_32x8d',
    ('bottleneck', (3, 4, 6, 3), 1, 128): 'wide_resnet50_2',
    ('bottleneck', (3, 4, 23, 3), 1, 128): 'wide_resnet101_2',
}

StateDict = Dict[str, torch.Tensor]


def fast_advprop_state_dict(checkpoint: Mapping) -> StateDict:
    """Our mixture-BN state dict from a loaded Fast AdvProp checkpoint (or its bare ``state_dict``).

    Raises:
        ValueError: No ``aux_bn`` key: not a mixture-BN (``--norm_layer mixbn``) checkpoint.
    """
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f'Expected a checkpoint dict, got {type(checkpoint).__name__}.')
    state_dict = strip_wrapper_prefixes(checkpoint.get('state_dict', checkpoint))
    marker = f'.{_AUX_BN_KEY}.'
    if not any(marker in key for key in state_dict):
        raise ValueError('No "aux_bn" keys: not a Fast AdvProp mixture-BN checkpoint (--norm_layer mixbn).')
    return {key.replace(marker, f'.{ADV_BN_KEY}.'): value for key, value in state_dict.items()}


def _stage_depths(state_dict: Mapping[str, torch.Tensor]) -> Tuple[int, ...]:
    return tuple(
        len({key.split('.')[1] for key in state_dict if key.startswith(f'layer{stage}.')}) for stage in range(1, 5))


def torchvision_resnet_name(state_dict: Mapping[str, torch.Tensor]) -> str:
    """The torchvision/timm ResNet name (``resnet50``, ``wide_resnet50_2``, ...) whose layout `state_dict` has.

    Raises:
        ValueError: The layout is none of the ResNets Fast AdvProp's ``net.py`` defines.
    """
    if 'layer1.0.conv2.weight' not in state_dict:
        raise ValueError('Not a torchvision-style ResNet state dict (no layer1.0.conv2.weight).')
    block = 'bottleneck' if 'layer1.0.conv3.weight' in state_dict else 'basic'
    conv2 = state_dict['layer1.0.conv2.weight']
    width = conv2.shape[0]
    groups = width // conv2.shape[1]
    layout = (block, _stage_depths(state_dict), groups, width // groups)
    if layout not in _TORCHVISION_RESNETS:
        raise ValueError(f'Unknown ResNet layout {layout} (block, blocks per stage, groups, width per group).')
    return _TORCHVISION_RESNETS[layout]


def convert_fast_advprop(
        src: Union[str, Path],
        dst: Union[str, Path],
        model_name: Optional[str] = None,
        branch: Optional[str] = None,
        overwrite: bool = False,
) -> Path:
    """Convert a Fast AdvProp checkpoint into an export folder.

    Args:
        src: The released ``.pth.tar`` (or any checkpoint saved by Fast AdvProp's ``imagenet.py``).
        dst: Export folder to write (``config.json`` + ``model.safetensors``).
        model_name: Target architecture, overriding the detected ``mbn_<arch>`` (or ``<arch>`` with `branch`).
        branch: Write one branch (``clean`` — Fast AdvProp's inference branch — or ``adv``) as a plain timm model.
        overwrite: Replace a non-empty `dst`.

    Raises:
        FileNotFoundError: No file at `src`.
        ValueError: A damaged file, not a Fast AdvProp checkpoint, an unknown layout, or keys that do not map one to
            one.
    """
    state_dict = fast_advprop_state_dict(load_weights_file(src))
    base = torchvision_resnet_name(state_dict)
    if branch is not None:
        state_dict = branch_state_dict(state_dict, branch)
    target = model_name or (base if branch else f'mbn_{base}')
    if branch is None and not timm.is_model(target):
        raise ValueError(f'No mixture-BN twin of {base} is registered: pass --branch clean|adv to convert one branch '
                         f'into timm {base}.')
    num_classes = state_dict['fc.weight'].shape[0]
    model = load_exactly(create_target(target, PREPROCESSING, num_classes), state_dict, str(src))
    origin = provenance(src, FORMAT, architecture=base, branch=branch or 'both', inference_branch='clean')
    return save_converted(model, dst, origin, overwrite=overwrite)
