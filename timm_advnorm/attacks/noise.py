"""Additive Gaussian noise, the "Noise" column of Galloway et al.

Galloway et al., *Batch normalization is a cause of adversarial vulnerability* (ICML workshop 2019), §3: test
accuracy under additive Gaussian noise of zero mean and variance 1/4 on inputs standardized to zero mean and unit
variance (after Ford et al., 2019). timm's normalized tensors are such standardized inputs, so the default adds
N(0, 0.5²) in normalized units (σ = 0.5·std_c on the [0, 1] pixel scale, about 29/255 for ImageNet's std). Noise is
not an adversary: the model is never queried and there is no ε budget, so results describe it by its model, σ and
the scale σ is on (`noise_settings`), never by a norm and ε.

On their MNIST models (§4, Table 6) the noise has unit variance and is drawn on the 28×28 digit before it is
upscaled (footnote 5: "to preserve the appearance of the noise"): ``size`` draws it at that side and upscales it
with nearest-neighbour interpolation, and ``grey`` draws one value per pixel shared by the channels (a grey image's
noise is grey).
"""
from typing import Any, Dict, Mapping, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .base import attack_dataclass
from .eval_attack import NoiseAttack
from .registry import register_attack
from .space import PIXEL_SCALE, InputSpace

__all__ = ['gaussian_noise', 'GaussianNoise', 'NOISE_UNITS', 'SIGMA_SCALES', 'noise_settings']

NOISE_UNITS = ('normalized', 'pixels')
#: The scale σ is on, per `units`, as results state it: the model's normalized input (σ = 1 is one per-channel
#: standard deviation of the data), or the 0-255 pixel scale in every channel.
SIGMA_SCALES = {'normalized': 'normalized input', 'pixels': '0-255'}
DEFAULT_STD = 0.5


def _check_noise(std: float, units: str, size: Optional[int]) -> None:
    if std < 0:
        raise ValueError(f'std must be >= 0, got {std}.')
    if units not in NOISE_UNITS:
        raise ValueError(f'units must be one of {NOISE_UNITS}, got {units!r}.')
    if size is not None and size < 1:
        raise ValueError(f'size must be >= 1, got {size}.')


def gaussian_noise(
        x: torch.Tensor,
        *,
        space: InputSpace,
        std: float = DEFAULT_STD,
        units: str = 'normalized',
        clip: bool = True,
        size: Optional[int] = None,
        grey: bool = False,
        generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """Add zero-mean Gaussian noise to normalized inputs.

    Args:
        x: Normalized inputs (B, C, H, W).
        space: The model's input normalization.
        std: Standard deviation; Galloway et al.: 0.5 on standardized inputs.
        units: ``normalized``: `std` in normalized (standardized) units, as Galloway et al.; ``pixels``: `std` on the
            0-255 scale, the same in every channel.
        clip: Clip the result to valid pixels ([0, 1]); the paper does not say, images stay images.
        size: Draw the noise at ``size``×``size`` and upscale it to the input's side with nearest-neighbour
            interpolation (None: at the input's side).
        grey: One noise value per pixel, the same in every channel.
        generator: Source of the noise (any device).

    Returns:
        Noisy inputs, normalized, with `x`'s shape and dtype.

    Example:
        >>> x_noisy = gaussian_noise(x, space=InputSpace.from_model(model), std=0.5)
    """
    _check_noise(std, units, size)
    device = x.device if generator is None else generator.device
    shape = (x.shape[0], 1 if grey else x.shape[1], *((size, size) if size else x.shape[2:]))
    noise = torch.randn(shape, generator=generator, device=device).to(x.device, x.dtype)
    if size:
        noise = F.interpolate(noise, size=x.shape[2:], mode='nearest')
    noise = noise.expand_as(x)
    scale = std if units == 'normalized' else std / PIXEL_SCALE / space.std_like(x).to(x.dtype)
    noisy = x + noise * scale
    return space.clamp(noisy).to(x.dtype) if clip else noisy


@register_attack('gaussian-noise')
@attack_dataclass
class GaussianNoise(NoiseAttack):
    """Additive Gaussian noise (see `gaussian_noise`); the model is not used. Defaults: Galloway et al.

    Args:
        space: The model's input normalization.
        std: Standard deviation (0.5).
        units: ``normalized`` (Galloway) or ``pixels`` (0-255 scale).
        clip: Clip to valid pixels (True).
        size: Side the noise is drawn at before nearest-neighbour upscaling (None: the input's).
        grey: One noise value per pixel, shared by the channels (False).
        eps, autocast_dtype, seed, bn_stats, fold_bn: See `NoiseAttack` (only `seed` matters).
    """

    std: float = DEFAULT_STD
    units: str = 'normalized'
    clip: bool = True
    size: Optional[int] = None
    grey: bool = False

    core = staticmethod(gaussian_noise)

    def check_options(self) -> None:
        _check_noise(self.std, self.units, self.size)

    def perturb(self, model: nn.Module, x, y, targets):
        return gaussian_noise(x, **self.core_kwargs())

    @classmethod
    def noise_fields(cls, options: Mapping[str, Any]) -> Dict[str, Any]:
        """The noise's model, σ, the scale σ is on and whether it is clipped (`noise_settings`)."""
        return noise_settings(options)


def noise_settings(kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """What a results entry states about the noise `kwargs` configure (`GaussianNoise` arguments, defaults where unset).

    In place of a norm and ε, which noise does not have: ``noise`` (the model, ``gaussian``), ``sigma`` (its standard
    deviation), ``sigma_scale`` (what σ is measured in, `SIGMA_SCALES`: ``normalized input`` for Galloway et al.) and
    ``clipped`` (noisy images clipped to valid pixels). ``size`` and ``grey`` are in the attack's recorded arguments.
    """
    units = kwargs.get('units', 'normalized')
    if units not in NOISE_UNITS:
        raise ValueError(f'units must be one of {NOISE_UNITS}, got {units!r}.')
    return dict(noise='gaussian', sigma=float(kwargs.get('std', DEFAULT_STD)), sigma_scale=SIGMA_SCALES[units],
                clipped=bool(kwargs.get('clip', True)))
