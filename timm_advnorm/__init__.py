"""timm-advnorm: normalization-aware adversarial training and robust evaluation for timm.

Importing the package registers its models with timm (``timm.create_model('mbn_resnet50')``).
"""
from . import models  # noqa: F401  (registers the model entrypoints with timm)
from .layers import (
    LogitInterpolation, MixtureBatchNorm2d, MixtureBatchNormAct2d, SyncMixtureBatchNorm2d, branch_state_dict,
    convert_sync_mixture_bn, convert_to_mixture_bn, export_branch, has_mixture_bn, route, set_route)

__version__ = '0.1.0'
