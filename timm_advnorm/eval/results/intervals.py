"""How precisely an accuracy measured on a finite set of images is known: the Wilson score interval.

An accuracy of 84 % on 200 images moves by 0.5 points per image, and its 95 % interval is about ±5 points wide:
plots draw that interval so that a one-image difference reads as the noise it is. Wilson's interval (unlike the
normal approximation) stays inside [0, 100] % and keeps a width at 0 % and 100 %, where robust accuracies often are.
"""
import math
from typing import Tuple

__all__ = ['wilson_interval', 'Z_95']

#: The standard normal quantile of a two-sided 95 % interval.
Z_95 = 1.959963984540054


def wilson_interval(accuracy: float, samples: int, z: float = Z_95) -> Tuple[float, float]:
    """The Wilson score interval of an accuracy measured on `samples` images.

    Args:
        accuracy: The measured accuracy, in percent.
        samples: Images it was measured on.
        z: Standard normal quantile of the interval's coverage (default: 95 %).

    Returns:
        ``(low, high)`` in percent, with ``0 <= low <= accuracy <= high <= 100``.

    Raises:
        ValueError: `samples` is not positive or `accuracy` is outside [0, 100].
    """
    if samples <= 0:
        raise ValueError(f'An accuracy needs at least one sample, got {samples}.')
    if not 0.0 <= accuracy <= 100.0:
        raise ValueError(f'An accuracy is a percentage in [0, 100], got {accuracy}.')
    p, n = accuracy / 100.0, samples
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low, high = max(0.0, center - half), min(1.0, center + half)
    return 100.0 * min(low, p), 100.0 * max(high, p)
