"""ImageNet-C common corruptions applied on the fly, through the optional package `imagecorruptions-imaug`.

Hendrycks & Dietterich, *Benchmarking neural network robustness to common corruptions and perturbations* (ICLR
2019): 15 corruptions in four groups (noise, blur, weather, digital) at severities 1-5, plus 4 held-out ones. The
corruption functions come from `imagecorruptions-imaug`, a maintained fork of bethgelab's `imagecorruptions` with the
same import name and API (the original 1.1.2 release needs `pkg_resources` and scikit-image's removed
``multichannel`` argument, so it no longer imports or runs with current setuptools and scikit-image). It is imported
lazily: the rest of the package works without it.

Like ImageNet-C, images are corrupted as 8-bit RGB (the input is quantized to uint8 first) and must be at least
32x32. Seeding: each image gets a seed drawn from the attack's generator; functions taking a ``seed`` receive it,
the others run with numpy's global RNG seeded with it and restored afterwards.
"""
import inspect
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from .base import attack_dataclass
from .eval_attack import NoiseAttack
from .registry import register_attack
from .space import InputSpace

__all__ = ['corrupt', 'Corruption', 'IMAGENET_C_CORRUPTIONS', 'HELD_OUT_CORRUPTIONS', 'SEVERITIES']

IMAGENET_C_CORRUPTIONS = (
    'gaussian_noise', 'shot_noise', 'impulse_noise', 'defocus_blur', 'glass_blur', 'motion_blur', 'zoom_blur', 'snow',
    'frost', 'fog', 'brightness', 'contrast', 'elastic_transform', 'pixelate', 'jpeg_compression')
HELD_OUT_CORRUPTIONS = ('speckle_noise', 'gaussian_blur', 'spatter', 'saturate')
SEVERITIES = (1, 2, 3, 4, 5)


def _imagecorruptions():
    """The `imagecorruptions` module, or an ImportError saying what to install."""
    try:
        import imagecorruptions
    except ImportError as e:
        raise ImportError(
            'Common corruptions need the optional package imagecorruptions-imaug: '
            'pip install imagecorruptions-imaug (the unmaintained imagecorruptions 1.1.2 does not import with current '
            f'setuptools and scikit-image). Import failed with: {e}') from e
    return imagecorruptions


def _check(corruption: str, severity: int) -> None:
    if corruption not in IMAGENET_C_CORRUPTIONS + HELD_OUT_CORRUPTIONS:
        raise ValueError(f'Unknown corruption {corruption!r}; available: '
                         f'{", ".join(IMAGENET_C_CORRUPTIONS + HELD_OUT_CORRUPTIONS)}.')
    if severity not in SEVERITIES:
        raise ValueError(f'severity must be one of {SEVERITIES}, got {severity!r}.')


@contextmanager
def _numpy_seeded(seed: Optional[int]) -> Iterator[None]:
    """Seed numpy's global RNG (which the corruption functions use) for the block, then restore its state."""
    if seed is None:
        yield
        return
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def corrupt(
        x: torch.Tensor,
        *,
        space: InputSpace,
        corruption: str,
        severity: int,
        seeds: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """Apply one ImageNet-C corruption at one severity to each image of a normalized batch.

    Args:
        x: Normalized RGB inputs (B, 3, H, W), H and W >= 32.
        space: The model's input normalization.
        corruption: One of `IMAGENET_C_CORRUPTIONS` or `HELD_OUT_CORRUPTIONS`.
        severity: 1 (mildest) to 5.
        seeds: One seed per image for reproducible corruptions; ``None`` uses numpy's global RNG.

    Returns:
        Corrupted inputs, normalized, with `x`'s shape, dtype and device.

    Raises:
        ImportError: `imagecorruptions-imaug` is not installed.

    Example:
        >>> x_c = corrupt(x, space=InputSpace.from_model(model), corruption='fog', severity=3, seeds=range(len(x)))
    """
    _check(corruption, severity)
    if x.dim() != 4 or x.shape[1] != 3 or min(x.shape[2:]) < 32:
        raise ValueError(f'Corruptions need RGB images of at least 32x32, shaped (B, 3, H, W); got {tuple(x.shape)}.')
    if seeds is not None and len(seeds) != x.shape[0]:
        raise ValueError(f'Got {len(seeds)} seeds for {x.shape[0]} images.')
    ic = _imagecorruptions()
    fn_takes_seed = 'seed' in inspect.signature(ic.corruption_dict[corruption]).parameters
    images = (space.to_pixels(x.detach().float()).clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)
    images = images.permute(0, 2, 3, 1).cpu().numpy()
    corrupted = []
    for i, image in enumerate(images):
        seed = None if seeds is None else int(seeds[i])
        kwargs = {'seed': seed} if fn_takes_seed and seed is not None else {}
        with _numpy_seeded(seed):
            corrupted.append(ic.corrupt(image, corruption_name=corruption, severity=severity, **kwargs))
    pixels = torch.from_numpy(np.stack(corrupted)).to(x.device).permute(0, 3, 1, 2).float() / 255.0
    return space.from_pixels(pixels).to(x.dtype)


@register_attack('corruption')
@attack_dataclass
class Corruption(NoiseAttack):
    """One ImageNet-C corruption at one severity (see `corrupt`); the model is not used.

    Args:
        space: The model's input normalization.
        corruption: Corruption name (``gaussian_noise``).
        severity: 1 to 5 (3).
        seed: Seeds the per-image corruption seeds (reproducible corruptions); see `Attack`.
        eps, autocast_dtype, bn_stats, fold_bn: See `NoiseAttack` (unused).

    Raises:
        ImportError: At construction, when `imagecorruptions-imaug` is not installed.
    """

    corruption: str = 'gaussian_noise'
    severity: int = 3

    core = staticmethod(corrupt)

    def check_options(self) -> None:
        _check(self.corruption, self.severity)
        _imagecorruptions()

    def _seeds(self, n: int) -> Optional[Tuple[int, ...]]:
        if self.generator is None:
            return None
        return tuple(torch.randint(0, 2 ** 31 - 1, (n,), generator=self.generator).tolist())

    def perturb(self, model: nn.Module, x, y, targets):
        return corrupt(x, seeds=self._seeds(x.shape[0]), **self.core_kwargs())

    @classmethod
    def noise_fields(cls, options: Mapping[str, Any]) -> Dict[str, Any]:
        """An ImageNet-C corruption (``noise`` ``imagenet-c``), its name and severity."""
        return dict(noise='imagenet-c', corruption=options['corruption'], severity=options['severity'])
