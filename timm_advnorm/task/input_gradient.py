"""The gradient of a loss to some rows of a model's input, completed at the model's first convolution.

A fused pass back-propagates one loss through a batch of which only some rows need their input gradient (Fast
AdvProp: the attacked fifth of the batch; the clean rows only train). Autograd computes an input's gradient for all
of its rows or for none, and for an image model most of that work is the first convolution's transposed convolution
at full resolution. Here the first convolution reads its input detached; the gradient at its output is captured, and
the wanted rows' share of the input gradient is one transposed convolution over those rows alone.

It applies where the model's first convolution (``pretrained_cfg['first_conv']``) is a plain `nn.Conv2d` (explicit
zero padding) and reads the input tensor itself. Any other path of the input to the loss (a stem that transforms the
input first, a convolution called on something else, a gradient-checkpointing recomputation) keeps autograd's own
input gradient, and both parts are summed: the result is the input gradient, wherever it came from.
"""
from contextlib import contextmanager
from typing import Iterator, List, Optional

import torch
import torch.nn as nn

from ..layers.recompute import is_recomputing

__all__ = ['RowsGradient', 'first_plain_conv', 'rows_gradient']


def first_plain_conv(model: nn.Module) -> Optional[nn.Conv2d]:
    """The model's first convolution (``pretrained_cfg['first_conv']``) when its input gradient is a plain transposed
    convolution: an `nn.Conv2d` with its own forward, zero padding given as numbers. None otherwise."""
    name = (getattr(model, 'pretrained_cfg', None) or {}).get('first_conv')
    if not isinstance(name, str):
        return None
    try:
        conv = model.get_submodule(name)
    except AttributeError:
        return None
    plain = (isinstance(conv, nn.Conv2d) and type(conv).forward is nn.Conv2d.forward
             and conv.padding_mode == 'zeros' and not isinstance(conv.padding, str))
    return conv if plain else None


class RowsGradient:
    """The gradient to ``input[rows]`` once the backward pass ran (`rows_gradient`)."""

    def __init__(self, input: torch.Tensor, rows: slice):
        self.input = input
        self.rows = rows
        self.at_first_conv: List[torch.Tensor] = []

    def __call__(self) -> torch.Tensor:
        """The gradient to the rows, summed over every path from them to the loss.

        Raises:
            RuntimeError: No gradient reached the input (the backward pass did not run, or the loss does not depend on
                it).
        """
        parts = list(self.at_first_conv)
        if self.input.grad is not None:
            parts.append(self.input.grad[self.rows])
        if not parts:
            raise RuntimeError('No gradient reached the input rows: run the backward pass of a loss that depends on '
                               'them first.')
        gradient = parts[0]
        for part in parts[1:]:
            gradient = gradient + part
        return gradient.to(self.input.dtype)


@contextmanager
def rows_gradient(model: nn.Module, input: torch.Tensor, rows: slice) -> Iterator[RowsGradient]:
    """Run the model's forward on `input` inside the block; after the backward pass, the yielded `RowsGradient` gives
    the gradient to ``input[rows]``, its share at the first convolution computed for those rows only.

    `input` must require gradients (autograd's part covers every path but the first convolution's). The gradient is
    the same as ``input.grad[rows]`` without this, up to the rounding of a convolution over fewer rows.
    """
    result = RowsGradient(input, rows)
    conv = first_plain_conv(model)
    if conv is None:
        yield result
        return
    detached: List[torch.Tensor] = []

    def detach_input(module: nn.Conv2d, args):
        # only where the output still gets a gradient: a frozen convolution's output would carry none to capture
        trained = torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters(recurse=False))
        if args[0] is input and trained and not is_recomputing():
            detached.append(input.detach())
            return (detached[-1], *args[1:])
        return None

    def capture_output_gradient(module: nn.Conv2d, args, output: torch.Tensor) -> None:
        if detached and args[0] is detached[-1] and output.requires_grad:
            output.register_hook(lambda grad: result.at_first_conv.append(_rows_input_gradient(module, input, rows,
                                                                                                grad)))

    handles = [conv.register_forward_pre_hook(detach_input), conv.register_forward_hook(capture_output_gradient)]
    try:
        yield result
    finally:
        for handle in handles:
            handle.remove()


def _rows_input_gradient(conv: nn.Conv2d, input: torch.Tensor, rows: slice, grad_output: torch.Tensor) -> torch.Tensor:
    """The convolution's input gradient for `rows` of its input, from its output gradient (in that gradient's dtype,
    as under autocast)."""
    rows_output = grad_output[rows]
    rows_shape = (rows_output.shape[0], *input.shape[1:])
    return torch.nn.grad.conv2d_input(rows_shape, conv.weight.to(rows_output.dtype), rows_output, conv.stride,
                                      conv.padding, conv.dilation, conv.groups)
