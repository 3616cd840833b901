"""Publicly released robust ImageNet ResNet-50s, loadable by tag: ``timm.create_model('robust_resnet50.<tag>',
pretrained=True)`` fetches the authors' file from the Hugging Face Hub and converts it on load.

Salman, Ilyas, Engstrom, Kapoor & Madry, *Do Adversarially Robust ImageNet Models Transfer Better?* (NeurIPS 2020,
arXiv:2007.08489) released PGD-trained ResNet-50s at several L∞ and L2 budgets, trained with the MadryLab
``robustness`` library and hosted on the Hub in ``madrylab/robust-imagenet-models`` (MIT licence). The L∞ ε=4/255
model is RobustBench's ``Salman2020Do_R50`` (64.02 % clean, 34.96 % AutoAttack on RobustBench's 5000 ImageNet
validation images).

A ``robustness`` checkpoint is ``torch.save({'model': DataParallel(AttackerModel).state_dict(), 'optimizer': ...,
'schedule': ..., 'epoch': ...})``: the classifier's weights under ``module.model.`` (torchvision ResNet names, which
timm's ResNet shares), a second copy under ``module.attacker.model.``, and the input normalization as buffers
``module.normalizer.new_mean``/``new_std`` (ImageNet's mean and std, applied inside the model). The filter keeps the
classifier, drops the attacker's copy, and checks the normalizer against the preprocessing the tag declares, so the
model takes timm's normalized input (normalizing twice, or not at all, is the classic way to get the wrong robust
accuracy from these files). Files are read with ``weights_only=True`` (timm's Hub loader): no pickled code runs.
"""
from typing import Any, Dict, Mapping

import torch
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.resnet import Bottleneck, ResNet

from ._cfg import resnet_cfg

__all__ = ['madry_robustness_filter', 'MADRY_HUB_ID', 'SALMAN_2020']

SALMAN_2020 = 'Do Adversarially Robust ImageNet Models Transfer Better?'
MADRY_HUB_ID = 'madrylab/robust-imagenet-models'
_MODEL_PREFIX = 'module.model.'
_ATTACKER_PREFIX = 'module.attacker.'
_NORMALIZER = ('module.normalizer.new_mean', 'module.normalizer.new_std')


def madry_robustness_filter(checkpoint: Mapping[str, Any], model: ResNet) -> Dict[str, torch.Tensor]:
    """The timm state dict of a MadryLab ``robustness`` ImageNet checkpoint (see the module docstring).

    Raises:
        ValueError: The file is not laid out as a ``robustness`` checkpoint, or its normalizer is not the mean and
            std the model's pretrained config declares (the weights would then see other inputs than in training).
    """
    state_dict = checkpoint.get('model', checkpoint.get('state_dict', checkpoint))
    if not any(key.startswith(_MODEL_PREFIX) for key in state_dict):
        raise ValueError(f'Not a MadryLab robustness checkpoint: no "{_MODEL_PREFIX}*" weights.')
    cfg = model.pretrained_cfg
    for key, expected in zip(_NORMALIZER, (cfg['mean'], cfg['std'])):
        found = state_dict.get(key)
        if found is None or not torch.allclose(found.flatten().float(), torch.tensor(expected), atol=1e-6):
            raise ValueError(f'The checkpoint normalizes with {key} = '
                             f'{None if found is None else found.flatten().tolist()}, not the {list(expected)} '
                             f'its pretrained config declares.')
    return {key[len(_MODEL_PREFIX):]: value for key, value in state_dict.items() if key.startswith(_MODEL_PREFIX)}


def _madry_cfg(filename: str, threat: str, clean: float, robust: str = '') -> Dict[str, Any]:
    """A tag of a ``madrylab/robust-imagenet-models`` file: RobustBench's ImageNet preprocessing (resize 256, center
    crop 224, bilinear, ImageNet mean/std) and, in `notes`, the threat model and published accuracies."""
    notes = (f'PGD adversarial training, {threat} (Salman et al. 2020, MadryLab robustness library).',
             f'Published clean top-1 on ImageNet val: {clean:.2f}% (madrylab/robust-imagenet-models model card).')
    if robust:
        notes += (robust,)
    return resnet_cfg(
        SALMAN_2020, hf_hub_id=MADRY_HUB_ID, hf_hub_filename=filename, license='mit', paper_ids='arXiv:2007.08489',
        origin_url=f'https://huggingface.co/{MADRY_HUB_ID}', notes=notes)


default_cfgs = generate_default_cfgs({
    'robust_resnet50.madry_linf4_in1k': _madry_cfg(
        'resnet50_linf_eps4.0.ckpt', 'L∞ ε=4/255', 63.86,
        'RobustBench Salman2020Do_R50 (L∞ ε=4/255, 5000 ImageNet val images): 64.02% clean, 34.96% AutoAttack.'),
    'robust_resnet50.madry_linf8_in1k': _madry_cfg('resnet50_linf_eps8.0.ckpt', 'L∞ ε=8/255', 54.53),
    'robust_resnet50.madry_l2_3_in1k': _madry_cfg('resnet50_l2_eps3.ckpt', 'L2 ε=3.0 (on [0, 1] pixels)', 62.83),
    'robust_resnet50.madry_linf2_in1k': _madry_cfg('resnet50_linf_eps2.0.ckpt', 'L∞ ε=2/255', 69.10),
    'robust_resnet50.madry_linf0p5_in1k': _madry_cfg('resnet50_linf_eps0.5.ckpt', 'L∞ ε=0.5/255', 73.73),
    'robust_resnet50.madry_l2_5_in1k': _madry_cfg('resnet50_l2_eps5.ckpt', 'L2 ε=5.0 (on [0, 1] pixels)', 56.13),
    'robust_resnet50.madry_l2_1_in1k': _madry_cfg('resnet50_l2_eps1.ckpt', 'L2 ε=1.0 (on [0, 1] pixels)', 70.43),
    'robust_resnet50.madry_l2_0p5_in1k': _madry_cfg('resnet50_l2_eps0.5.ckpt', 'L2 ε=0.5 (on [0, 1] pixels)', 73.16),
    'robust_resnet50.madry_l2_0p1_in1k': _madry_cfg('resnet50_l2_eps0.1.ckpt', 'L2 ε=0.1 (on [0, 1] pixels)', 74.78),
})


@register_model
def robust_resnet50(pretrained: bool = False, **kwargs: Any) -> ResNet:
    """timm's ResNet-50 (torchvision layout) whose tags load the MadryLab robust ImageNet weights."""
    model_args = dict(block=Bottleneck, layers=(3, 4, 6, 3))
    return build_model_with_cfg(ResNet, 'robust_resnet50', pretrained, pretrained_filter_fn=madry_robustness_filter,
                                **dict(model_args, **kwargs))
