"""timm-advnorm: normalization-aware adversarial training and robust evaluation for timm.

Importing the package registers its models with timm (``timm.create_model('mbn_resnet50')``), its attacks with
`create_attack` and its training methods with `register_task` (``train_adv.py --method``).
"""
from . import models  # noqa: F401  (registers the model entrypoints with timm)
from .attacks import InputSpace, create_attack, list_attacks
from .hub import create_model_from_name_or_checkpoint, load_weights
from .layers import (
    LogitInterpolation, MixtureBatchNorm2d, MixtureBatchNormAct2d, SyncMixtureBatchNorm2d, branch_state_dict,
    convert_sync_mixture_bn, convert_to_mixture_bn, deinterleave, export_branch, get_inference_branch, has_mixture_bn,
    interleave, route, set_inference_branch, set_route)
from .models import base_architecture
from .task import create_task, list_tasks, register_task

__version__ = '0.1.0'
