"""Durations as the plans of training and evaluation print them."""
from typing import Optional

__all__ = ['duration_text', 'seconds_text']


def duration_text(seconds: Optional[float]) -> str:
    """``0.42 s``, ``45.0 s``, ``12.3 min``, ``2.1 h`` or ``9.6 d``; ``n/a`` when not measured."""
    if seconds is None:
        return 'n/a'
    for unit, size in (('d', 86400), ('h', 3600), ('min', 60)):
        if seconds >= size:
            return f'{seconds / size:.1f} {unit}'
    return f'{seconds:.2f} s' if seconds < 10 else f'{seconds:.1f} s'


def seconds_text(seconds: float) -> str:
    """A short time (a pass of a model) in s, ms or µs, 3 significant digits: ``1.23 ms``."""
    for unit, size in (('s', 1.0), ('ms', 1e-3)):
        if seconds >= size:
            return f'{seconds / size:.3g} {unit}'
    return f'{seconds * 1e6:.3g} µs'
