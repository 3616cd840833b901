"""Normalization layers for adversarial training: mixture BN, its routing, conversion and export, and gradient
checkpointing that keeps their routes and running statistics."""
from .checkpointing import guard_batch_norm_statistics, set_grad_checkpointing, unguard_batch_norm_statistics
from .convert import ADV_BN_KEY, branch_state_dict, convert_sync_mixture_bn, convert_to_mixture_bn, export_branch
from .interpolation import LogitInterpolation
from .mixture_bn import ROUTES, MixtureBatchNorm2d, MixtureBatchNormAct2d
from .routing import (
    INFERENCE_BRANCHES, RouteState, deinterleave, get_inference_branch, get_route, has_mixture_bn, interleave,
    mixture_bn_modules, preserve_route, restore_route, route, set_inference_branch, set_route)
from .sync_mixture_bn import SyncMixtureBatchNorm2d, SyncMixtureBatchNormAct2d
from .tf_same_padding import use_tf_same_padding

__all__ = ['guard_batch_norm_statistics', 'set_grad_checkpointing', 'unguard_batch_norm_statistics', 'ADV_BN_KEY',
    'branch_state_dict', 'convert_sync_mixture_bn', 'convert_to_mixture_bn', 'export_branch', 'LogitInterpolation',
    'ROUTES', 'MixtureBatchNorm2d', 'MixtureBatchNormAct2d', 'INFERENCE_BRANCHES', 'RouteState', 'deinterleave',
    'get_inference_branch', 'get_route', 'has_mixture_bn', 'interleave', 'mixture_bn_modules', 'preserve_route',
    'restore_route', 'route', 'set_inference_branch', 'set_route', 'SyncMixtureBatchNorm2d',
    'SyncMixtureBatchNormAct2d', 'use_tf_same_padding']
