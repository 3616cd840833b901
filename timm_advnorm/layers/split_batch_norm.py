"""Training-mode batch norm of a batch's two row blocks, each with its own tensors, written into one output.

This is the ``split`` route's fused form. As two batch-norm calls and a concatenation, every mixture-BN layer would
copy its whole activation once more in the forward pass (the concatenation) than a plain batch norm does. Here both
blocks are normalized straight into one output tensor. The backward pass still joins the two blocks' input gradients
(torch has no CPU batch-norm backward that writes into a slice).
"""
from typing import NamedTuple, Optional, Tuple

import torch

__all__ = ['BlockNorm', 'split_batch_norm']


class BlockNorm(NamedTuple):
    """The tensors that normalize one row block: affine parameters, running statistics (updated in place) and the
    running-statistics momentum of this forward."""
    weight: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]
    running_mean: Optional[torch.Tensor]
    running_var: Optional[torch.Tensor]
    momentum: float


def _stats_dtype(x: torch.Tensor, block: BlockNorm) -> torch.dtype:
    """The dtype a CPU batch norm saves its batch statistics in: its parameters' for a reduced-precision input with
    float parameters (mixed precision), else the input's."""
    return next((t.dtype for t in (block.weight, block.running_mean) if t is not None), x.dtype)


class _SplitBatchNorm(torch.autograd.Function):
    """Batch statistics of each block, the running statistics of each updated, one output."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, n_first: int, eps: float, *blocks_flat) -> torch.Tensor:
        blocks = (BlockNorm(*blocks_flat[:5]), BlockNorm(*blocks_flat[5:]))
        out = torch.empty_like(x)
        saved = []
        for rows, block in zip((slice(None, n_first), slice(n_first, None)), blocks):
            mean = x.new_empty(x.shape[1], dtype=_stats_dtype(x, block))
            invstd = torch.empty_like(mean)
            torch.ops.aten.native_batch_norm.out(
                x[rows], block.weight, block.bias, block.running_mean, block.running_var, True, block.momentum, eps,
                out=out[rows], save_mean=mean, save_invstd=invstd)
            saved += [block.weight, mean, invstd]
        ctx.save_for_backward(x, *saved)
        ctx.n_first, ctx.eps = n_first, eps
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        x, *saved = ctx.saved_tensors
        n_first = ctx.n_first
        # needs_input_grad: x, n_first, eps, then (weight, bias, running_mean, running_var, momentum) per block
        grad_inputs, grad_params = [], []
        for i, rows in enumerate((slice(None, n_first), slice(n_first, None))):
            weight, mean, invstd = saved[3 * i:3 * i + 3]
            needs_weight, needs_bias = ctx.needs_input_grad[3 + 5 * i:5 + 5 * i]
            grad_input, grad_weight, grad_bias = torch.ops.aten.native_batch_norm_backward(
                grad_out[rows], x[rows], weight, None, None, mean, invstd, True, ctx.eps,
                [ctx.needs_input_grad[0], needs_weight, needs_bias])
            grad_inputs.append(grad_input)
            grad_params.append((grad_weight if needs_weight else None, grad_bias if needs_bias else None,
                                None, None, None))
        grad_x = torch.cat(grad_inputs) if ctx.needs_input_grad[0] else None
        return (grad_x, None, None, *grad_params[0], *grad_params[1])


def split_batch_norm(x: torch.Tensor, n_first: int, first: BlockNorm, second: BlockNorm, eps: float) -> torch.Tensor:
    """Batch norm in training mode of ``x[:n_first]`` with `first`'s tensors and of ``x[n_first:]`` with `second`'s:
    batch statistics per block, each block's running statistics updated with its own momentum.

    Equal to ``torch.cat`` of two ``F.batch_norm(..., training=True)`` calls on the blocks, without the copy of the
    concatenation. Both blocks must hold rows (``0 < n_first < len(x)``).
    """
    if not 0 < n_first < x.shape[0]:
        raise ValueError(f'split_batch_norm needs rows in both blocks: n_first={n_first} of {x.shape[0]} rows.')
    return _SplitBatchNorm.apply(x, n_first, eps, *first, *second)
