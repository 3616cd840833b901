"""NoFrost checkpoints (Wang et al., ICML 2022) to timm's ``nf_resnet26`` / ``nf_resnet50``.

The released code (github.com/amazon-science/normalizer-free-robust-training, ``PGDAT.py`` and ``test.py``)
builds its NF-ResNets with ``timm.create_model('nf_resnet50')`` itself and wraps them in DataParallel/DDP, so
the weights already use timm's NF-ResNet names (``stem.conv.{weight,bias,gain}``,
``stages.N.M.{conv1,conv2,conv3,downsample.conv}.{weight,bias,gain}`` of the scaled weight-standardized convs,
``head.fc``) behind a ``module.`` prefix. ``best_RA.pth`` / ``best_SA.pth`` hold that bare state dict;
``latest.pth`` wraps it as ``{'model': ..., 'optimizer': ..., 'epoch': ...}``. The conversion removes the prefix,
picks the architecture from the blocks per stage, and loads strictly: any key that timm's current NF-ResNet lacks,
or lacks from the file, fails the conversion rather than being dropped.

NoFrost evaluates RGB images normalized with ImageNet mean/std at 224 after a resize to 256 (bilinear), not
timm's ``nf_resnet50`` defaults (bicubic, crop 0.94, test size 288): the export's config says so.
"""
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from ..messages import counted_names
from ..weights.checkpoint import load_weights_file, strip_wrapper_prefixes
from .common import create_target, load_exactly, provenance, save_converted

__all__ = ['FORMAT', 'PREPROCESSING', 'nofrost_state_dict', 'nf_resnet_name', 'convert_nofrost']

FORMAT = 'nofrost'
PREPROCESSING = dict(
    input_size=(3, 224, 224), crop_pct=0.875, interpolation='bilinear', mean=IMAGENET_DEFAULT_MEAN,
    std=IMAGENET_DEFAULT_STD, license='apache-2.0', paper_name='Removing Batch Normalization Boosts Adversarial '
    'Training', origin_url='https://github.com/amazon-science/normalizer-free-robust-training')
_NF_RESNETS = {(2, 2, 2, 2): 'nf_resnet26', (3, 4, 6, 3): 'nf_resnet50', (3, 4, 23, 3): 'nf_resnet101'}

StateDict = Dict[str, torch.Tensor]


def nofrost_state_dict(checkpoint: Mapping) -> StateDict:
    """The timm NF-ResNet state dict inside a loaded NoFrost file (``best_*.pth`` or ``latest.pth``).

    Raises:
        ValueError: Neither a state dict nor a dict with a ``model`` state dict.
    """
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f'Expected a state dict, got {type(checkpoint).__name__}.')
    state_dict = checkpoint.get('model', checkpoint)
    if not state_dict or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise ValueError('Not a NoFrost checkpoint: expected a state dict or a dict with a "model" state dict.')
    return strip_wrapper_prefixes(state_dict)


def nf_resnet_name(state_dict: Mapping[str, torch.Tensor]) -> str:
    """timm's NF-ResNet (``nf_resnet26``, ``nf_resnet50``, ``nf_resnet101``) with this many blocks per stage.

    Raises:
        ValueError: No ``stages.*`` keys (weights of another architecture), or a block layout of no timm NF-ResNet.
    """
    if not any(key.startswith('stages.') for key in state_dict):
        raise ValueError(f'No "stages.*" keys: not the weights of a timm NF-ResNet, as NoFrost saves them '
                         f'({counted_names(sorted(state_dict), "key")}).')
    depths = tuple(
        len({key.split('.')[2] for key in state_dict if key.startswith(f'stages.{stage}.')}) for stage in range(4))
    if depths not in _NF_RESNETS:
        raise ValueError(f'Blocks per stage {depths} match no timm NF-ResNet ({sorted(_NF_RESNETS.values())}).')
    return _NF_RESNETS[depths]


def convert_nofrost(
        src: Union[str, Path],
        dst: Union[str, Path],
        model_name: Optional[str] = None,
        overwrite: bool = False,
) -> Path:
    """Convert a NoFrost checkpoint into an export folder loadable by stock timm.

    Args:
        src: ``best_RA.pth``, ``best_SA.pth`` or ``latest.pth`` of a NoFrost run.
        dst: Export folder to write (``config.json`` + ``model.safetensors``).
        model_name: Target architecture, overriding the one detected from the blocks per stage.
        overwrite: Replace a non-empty `dst`.

    Raises:
        FileNotFoundError: No file at `src`.
        ValueError: A damaged file, not a NoFrost checkpoint, or keys that do not map one to one.
    """
    state_dict = nofrost_state_dict(load_weights_file(src))
    target = model_name or nf_resnet_name(state_dict)
    if 'head.fc.weight' not in state_dict:
        raise ValueError(f'{src}: no classifier "head.fc.weight".')
    model = create_target(target, PREPROCESSING, state_dict['head.fc.weight'].shape[0])
    load_exactly(model, state_dict, str(src))
    return save_converted(model, dst, provenance(src, FORMAT, architecture=target), overwrite=overwrite)
