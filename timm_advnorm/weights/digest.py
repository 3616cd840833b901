"""The identity of a set of weights: a SHA-256 digest of the tensors, which binds results to the weights they describe.

``validate_adv.py`` records, with its results, the digest of the weights it evaluated (`state_dict_digest`) and, for a
mixture-BN model, of each branch as the plain-BN model ``--branch`` exports (`branch_digests`); ``hub/publish.py``
computes the digest of the weights it exports the same way and publishes only results that record it. Hashing the
loaded tensors rather than a file covers every source alike: a checkpoint overwritten in place, an export, a Hub
revision that moved, ``--use-ema``, ``--branch``.
"""
import hashlib
from typing import Dict, Iterable, Mapping, Tuple

import torch
import torch.nn as nn

from ..layers import ADV_BN_KEY, INFERENCE_BRANCHES, branch_state_dict

__all__ = ['tensors_digest', 'state_dict_digest', 'branch_digests']


def tensors_digest(tensors: Iterable[Tuple[str, torch.Tensor]]) -> str:
    """SHA-256 of named tensors in the order given: each name, dtype, shape and the tensor's bytes."""
    digest = hashlib.sha256()
    for name, tensor in tensors:
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f'{name}:{tensor.dtype}:{tuple(tensor.shape)};'.encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def state_dict_digest(state_dict: Mapping[str, torch.Tensor]) -> str:
    """The digest of a state dict, its keys sorted: the same weights give the same digest whatever order a model
    or a branch export lists them in."""
    return tensors_digest(sorted(state_dict.items()))


def branch_digests(model: nn.Module) -> Dict[str, str]:
    """For a mixture-BN model, the digest of each branch as a plain-BN model (what ``--branch`` exports and
    evaluates); empty for any other model."""
    state_dict = model.state_dict()
    if not any(f'.{ADV_BN_KEY}.' in key for key in state_dict):
        return {}
    return {branch: state_dict_digest(branch_state_dict(state_dict, branch)) for branch in INFERENCE_BRANCHES}
