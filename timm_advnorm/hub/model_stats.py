"""A model's size and cost as timm's model cards state them ("Params (M)", "GMACs", "Image size").

Parameters are counted as stored (a mixture-BN model's both branches included); multiply-accumulates are those of
one forward of one image at the model's input size, counted by `torch.utils.flop_counter.FlopCounterMode` (which
counts a multiply-accumulate as two FLOPs) on the model in eval mode, on the route it loads on.
"""
from dataclasses import dataclass
from typing import Sequence, Tuple

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ['ModelStats', 'count_model_stats']


@dataclass(frozen=True)
class ModelStats:
    """Size and cost of a model at its input size.

    Attributes:
        params: Parameters.
        macs: Multiply-accumulates of one forward of one image.
        image_size: Input height and width.
    """

    params: int
    macs: int
    image_size: Tuple[int, int]

    def format(self) -> str:
        """Markdown list items as in timm's cards: ``- Params (M): 0.383`` ... ``- Image size: 32 x 32``."""
        height, width = self.image_size
        return (f'- Params (M): {self.params / 1e6:.3g}\n- GMACs: {self.macs / 1e9:.3g}\n'
                f'- Image size: {height} x {width}')


def count_model_stats(model: nn.Module, input_size: Sequence[int]) -> ModelStats:
    """Count `model`'s parameters and the multiply-accumulates of one forward of a ``(1, *input_size)`` batch.

    The model is run once in eval mode, without gradients, and left in the mode it was in.
    """
    parameter = next(model.parameters(), None)
    x = torch.zeros(1, *input_size, device=None if parameter is None else parameter.device,
                    dtype=None if parameter is None else parameter.dtype)
    training = model.training
    counter = FlopCounterMode(display=False)
    try:
        model.eval()
        with torch.no_grad(), counter:
            model(x)
    finally:
        model.train(training)
    return ModelStats(params=sum(p.numel() for p in model.parameters()), macs=counter.get_total_flops() // 2,
                      image_size=(int(input_size[-2]), int(input_size[-1])))
