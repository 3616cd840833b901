"""The input space attacks work in: timm's normalized tensors, with budgets given on the 0-255 pixel scale.

Users state ε and step sizes as the papers do (ε=16, step 1 on the 0-255 scale). timm's loaders hand the model
``(pixel - mean) / std`` per channel, so an L∞ budget of ε pixels is ``ε / 255 / std_c`` per channel and the valid
range of channel c is ``[(0 - mean_c) / std_c, (1 - mean_c) / std_c]``. L2 budgets are measured on the [0, 1] pixel
scale (ε given on the 0-255 scale is divided by 255), so an L2 attack rescales its perturbation by ``std`` before
taking norms.
"""
from dataclasses import dataclass
from typing import Any, Dict, Sequence

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, resolve_data_config

__all__ = ['InputSpace', 'PIXEL_SCALE']

PIXEL_SCALE = 255.0


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
        """An L∞ budget of `pixels` (0-255 scale) in normalized units, per channel, shaped (1, C, 1, 1)."""
        return (pixels / PIXEL_SCALE) / self.std_like(like)

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
