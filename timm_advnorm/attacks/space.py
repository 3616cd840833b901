"""The input space attacks work in: timm's normalized tensors, with budgets given on the 0-255 pixel scale.

Users state ε and step sizes as the papers do (ε=16, step 1 on the 0-255 scale). timm's loaders hand the model
``(pixel - mean) / std`` per channel, so an L∞ budget of ε pixels is ``ε / 255 / std_c`` per channel and the valid
range of channel c is ``[(0 - mean_c) / std_c, (1 - mean_c) / std_c]``. L2 budgets are measured on the [0, 1] pixel
scale (ε given on the 0-255 scale is divided by 255), so an L2 attack rescales its perturbation by ``std`` before
taking norms.

A budget in (0, 1) on this scale is next to no attack (0.031 is 0.031/255 of the pixel range) and almost always a
[0, 1]-scale value given by mistake (8/255 = 0.031): attacks built with one warn (`check_budget_scale`) unless the
caller states the scale with `PixelBudget` (``eps=PixelBudget(0.5)``: half a grey level, on purpose).
"""
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Sequence

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, resolve_data_config

__all__ = ['InputSpace', 'PIXEL_SCALE', 'PixelBudget', 'BudgetScaleWarning', 'check_budget_scale', 'scale_255_text']

#: The pixel scale budgets are given on (ε=16 means 16/255 of the [0, 1] range).
PIXEL_SCALE = 255.0
#: This package's name: a warning points at the first caller outside its modules.
_PACKAGE = __name__.split('.')[0]


class PixelBudget(float):
    """A budget stated on the 0-255 scale on purpose: ``create_attack('pgd', space=space, eps=PixelBudget(0.5))``
    attacks with half a grey level (0.5/255 of the pixel range) without the warning a plain 0.5 gets
    (`check_budget_scale`). It is a float in every other respect."""

    def __repr__(self) -> str:
        return f'PixelBudget({float(self)!r})'


class BudgetScaleWarning(UserWarning):
    """A budget in (0, 1) read on the 0-255 scale: probably a [0, 1]-scale value (8/255 = 0.031) given by mistake."""


def scale_255_text(fraction: float) -> str:
    """What a [0, 1]-scale value reads as on the 0-255 scale, as a user would write it: ``8`` for 0.031 (8/255 is
    0.0314), ``7.65`` for 0.03 (Galloway's ε∞), ``2.55`` for 0.01; a whole number when within 2 % of one."""
    value = fraction * PIXEL_SCALE
    whole = round(value)
    return f'{whole:d}' if whole >= 1 and abs(value - whole) <= 0.02 * value else f'{value:.3g}'


def _caller_stacklevel() -> int:
    """The `warnings.warn` stacklevel, seen from the function calling this one, of the first frame outside this
    package: the user's call, however deep inside the package the warning is raised. Frames are told by their
    module, not their file: an attack's constructor is generated code (a dataclass ``__init__``) without a file."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get('__name__', '').partition('.')[0] == _PACKAGE:
        frame, level = frame.f_back, level + 1
    return level


def check_budget_scale(eps: float, name: str = 'eps') -> None:
    """Warn (`BudgetScaleWarning`) when 0 < `eps` < 1 and `eps` is not a `PixelBudget`: on the 0-255 scale such a
    budget is next to no attack, and its accuracy would pass for robust accuracy. The warning names the probable
    meaning (``eps=0.031`` -> ``8 (= 8/255)``) and points at the caller's line outside this package."""
    if 0 < eps < 1 and not isinstance(eps, PixelBudget):
        meant = scale_255_text(eps)
        warnings.warn(f'{name}={eps:g} is read on the 0-255 scale, {eps:g}/255 of the pixel range: next to no attack. '
                      f'Did you mean {name}={meant} (= {meant}/255)? Pass {name}=PixelBudget({eps:g}) to state the '
                      f'0-255 scale.', BudgetScaleWarning, stacklevel=_caller_stacklevel())


@dataclass(frozen=True)
class InputSpace:
    """Per-channel normalization of a model's inputs, and the budgets and bounds it implies.

    Args:
        mean: Per-channel mean on the [0, 1] pixel scale.
        std: Per-channel standard deviation on the [0, 1] pixel scale.
    """

    mean: Sequence[float] = IMAGENET_DEFAULT_MEAN
    std: Sequence[float] = IMAGENET_DEFAULT_STD

    @classmethod
    def from_data_config(cls, data_config: Dict[str, Any]) -> 'InputSpace':
        """From a timm data config (``resolve_data_config`` output)."""
        return cls(mean=tuple(data_config['mean']), std=tuple(data_config['std']))

    @classmethod
    def from_model(cls, model: nn.Module) -> 'InputSpace':
        """From the model's own pretrained config, as timm's loaders would normalize its inputs."""
        return cls.from_data_config(resolve_data_config({}, model=model))

    def _channel(self, values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=like.device).view(1, -1, 1, 1)

    def std_like(self, x: torch.Tensor) -> torch.Tensor:
        """Per-channel std shaped (1, C, 1, 1), on `x`'s device."""
        return self._channel(self.std, x)

    def mean_like(self, x: torch.Tensor) -> torch.Tensor:
        """Per-channel mean shaped (1, C, 1, 1), on `x`'s device."""
        return self._channel(self.mean, x)

    def linf_budget(self, pixels: float, like: torch.Tensor) -> torch.Tensor:
        """An L∞ budget of `pixels` (0-255 scale) in normalized units, per channel, shaped (1, C, 1, 1), in `like`'s
        dtype (computed in fp32, as the channel statistics are stored)."""
        return ((pixels / PIXEL_SCALE) / self.std_like(like)).to(like.dtype)

    def bounds(self, like: torch.Tensor):
        """Per-channel (lower, upper) of valid normalized inputs, each shaped (1, C, 1, 1)."""
        mean, std = self.mean_like(like), self.std_like(like)
        return (0.0 - mean) / std, (1.0 - mean) / std

    def clamp(self, x: torch.Tensor) -> torch.Tensor:
        """Clip normalized inputs to the image range [0, 1] in pixel space."""
        lower, upper = self.bounds(x)
        return torch.maximum(torch.minimum(x, upper), lower)

    def to_pixels(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized inputs to the [0, 1] pixel scale."""
        return x * self.std_like(x) + self.mean_like(x)

    def from_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """[0, 1] pixels to normalized inputs."""
        return (pixels - self.mean_like(pixels)) / self.std_like(pixels)
