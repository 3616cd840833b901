"""Join a mixture-BN branch that a forward does not route to into the autograd graph, with a zero gradient.

A training forward on the ``clean`` or ``adv`` route leaves the other branch's affine parameters out of the graph.
Plain `DistributedDataParallel` (timm's ``train.py`` wraps models without ``find_unused_parameters``) then waits for
their gradients forever and fails at the next step ("Expected to have finished reduction in the prior iteration"),
and timm's model checks expect every parameter to receive a gradient. Joining the idle parameters through an
identity on the active branch's bias gives them an exact zero gradient at the cost of one small vector op per layer;
the forward's values are unchanged whatever the idle parameters hold (NaN included).
"""
from typing import Optional, Tuple

import torch

__all__ = ['join_idle']


class _JoinIdle(torch.autograd.Function):
    """Identity on its first input; the other inputs get a zero gradient."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, *idle: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*idle)
        return tensor.view_as(tensor)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return (grad, *(torch.zeros_like(t) for t in ctx.saved_tensors))


def join_idle(active: Optional[torch.Tensor], *idle: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """`active` unchanged, with the `idle` tensors that require a gradient attached to its graph at zero gradient.

    Nothing is joined where `active` is None (no affine parameters) or no idle tensor requires a gradient.
    """
    joined = [t for t in idle if t is not None and t.requires_grad]
    if active is None or not joined:
        return active
    return _JoinIdle.apply(active, *joined)
