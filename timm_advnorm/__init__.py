"""timm-advnorm: normalization-aware adversarial training and robust evaluation for timm.

Importing the package registers its models with timm (``timm.create_model('mbn_resnet50')``) and its attacks with
`create_attack`, and loads the layers they are built of. The rest loads on first use, as timm and torch load their heavy
parts (PEP 562): the training methods with `create_task`, `list_tasks` or `register_task` (which registers a plug-in
method for ``train_adv.py --method``), checkpoint and Hub loading with `load_weights` or
`create_model_from_name_or_checkpoint`; each subpackage on first access (``timm_advnorm.hub.render_model_card``).
Training, evaluation, publishing and studies load only with their commands or such an access.
"""
from . import models  # noqa: F401  (registers the model entrypoints with timm)
from .attacks import InputSpace, create_attack, list_attacks
from .layers import (
    LogitInterpolation, MixtureBatchNorm2d, MixtureBatchNormAct2d, SyncMixtureBatchNorm2d, branch_state_dict,
    convert_sync_mixture_bn, convert_to_mixture_bn, deinterleave, export_branch, get_inference_branch, has_mixture_bn,
    interleave, route, set_inference_branch, set_route)
from .lazy import lazy_names as _lazy_names
from .models import base_architecture

__version__ = '0.1.0'

#: Public names loaded on first use, by the submodule that defines them.
_LAZY_NAMES = {
    'create_model_from_name_or_checkpoint': 'weights',
    'load_weights': 'weights',
    'create_task': 'task',
    'list_tasks': 'task',
    'register_task': 'task',
}

__all__ = [
    'InputSpace', 'LogitInterpolation', 'MixtureBatchNorm2d', 'MixtureBatchNormAct2d', 'SyncMixtureBatchNorm2d',
    'base_architecture', 'branch_state_dict', 'convert_sync_mixture_bn', 'convert_to_mixture_bn', 'create_attack',
    'deinterleave', 'export_branch', 'get_inference_branch', 'has_mixture_bn', 'interleave', 'list_attacks', 'route',
    'set_inference_branch', 'set_route', *_LAZY_NAMES]


__getattr__, __dir__ = _lazy_names(globals(), _LAZY_NAMES)
