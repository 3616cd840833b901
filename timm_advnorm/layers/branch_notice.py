"""Say which branch a mixture-BN model runs on when it loads weights whose adversarial branch was trained.

A mixture-BN entrypoint called without ``inference_branch`` runs on the clean branch. timm's own loaders
(``timm.create_model(name, checkpoint_path=...)``, `timm.models.load_checkpoint`) read only a file's state dict, not
the branch a training run or an export records, so such a model would silently run on the clean branch of weights
that `timm_advnorm`'s loaders, the evaluation and publishing run on the recorded one: one file, two models. Until a
branch is chosen explicitly (the ``inference_branch`` argument, `set_inference_branch`), loading weights whose two
branches differ logs which branch the model runs on and how to choose the other.
"""
import logging
import weakref
from typing import Any, Dict, List, Mapping

import torch
import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from .mixture_bn import MixtureBatchNorm2d

__all__ = ['notice_default_branch', 'forget_default_branch']

_logger = logging.getLogger(__name__)
_ADV = '.adv_bn.'
_HANDLES: 'weakref.WeakKeyDictionary[nn.Module, RemovableHandle]' = weakref.WeakKeyDictionary()


def _trained_adv_branch(state_dict: Mapping[str, Any], prefix: str) -> bool:
    """Whether some adversarial-branch tensor under `prefix` differs from its clean counterpart."""
    for key, value in state_dict.items():
        if not key.startswith(prefix) or _ADV not in key or not isinstance(value, torch.Tensor):
            continue
        clean = state_dict.get(key.replace(_ADV, '.', 1))
        if isinstance(clean, torch.Tensor) and (clean.shape != value.shape or not torch.equal(clean, value)):
            return True
    return False


def _notice(module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Dict[str, Any], strict: bool,
            missing_keys: List[str], unexpected_keys: List[str], error_msgs: List[str]) -> None:
    on_clean = all(m.route == 'clean' for m in module.modules() if isinstance(m, MixtureBatchNorm2d))
    if on_clean and _trained_adv_branch(state_dict, prefix):
        name = (getattr(module, 'pretrained_cfg', None) or {}).get('architecture', type(module).__name__)
        _logger.warning(
            f'{name} runs on its clean branch (the default): the weights it loads have a trained adversarial branch '
            f'too. Pass inference_branch="adv" to timm.create_model for that branch, or load with '
            f'timm_advnorm.create_model_from_name_or_checkpoint, which runs on the branch a checkpoint or export '
            f'records.')


def notice_default_branch(model: nn.Module) -> nn.Module:
    """Have `model`, on the clean branch by default, log so when it loads weights with a trained adversarial branch.

    Returns:
        `model`, for chaining.
    """
    forget_default_branch(model)
    _HANDLES[model] = model.register_load_state_dict_pre_hook(_notice)
    return model


def forget_default_branch(model: nn.Module) -> None:
    """A branch was chosen for `model`: loading weights says nothing more."""
    handle = _HANDLES.pop(model, None)
    if handle is not None:
        handle.remove()
