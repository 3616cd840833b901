"""Square attack, L∞: a score-based black-box attack by random search (forward passes only, no gradients).

Andriushchenko, Croce, Flammarion & Hein, *Square attack: a query-efficient black-box adversarial attack via random
search* (ECCV 2020), with AutoAttack's settings (p_init = 0.8, 5000 queries, schedule not rescaled to the budget):

* start at vertical stripes: each column of each channel gets +ε or -ε;
* each query redraws one square window of side ``s = round(sqrt(p · H · W))`` to ±2ε per channel (then projects
  onto the ε-box), and keeps it if the margin loss ``z_y - max_{i != y} z_i`` decreases;
* p halves at iterations 10, 50, 200, 500, 1000, 2000, 4000, 6000 and 8000 (``rescale_schedule`` maps the
  10000-iteration schedule onto the budget instead, as the paper does for smaller budgets).

Each sample draws its own window position and signs (the reference implementation shares one draw across the
batch, so its result depends on batch composition); positions range over every valid offset. A sample stops
being queried once fooled. Queries per sample: one on the clean input (misclassified samples are returned
unchanged), one at the start, then one per iteration; `n_queries` bounds the total.
"""
import math
from typing import Callable, Optional

import torch
import torch.nn as nn

from .base import attack_dataclass, attack_inputs, forward_logits, project, uniform
from .best_iterate import BestIterate
from .core import rounding_tolerance
from .eval_attack import EvalAttack, clean_record
from .losses import margin
from .progress import ProgressFn, reporter, restart_part
from .registry import register_attack
from .space import InputSpace

__all__ = ['square', 'Square', 'square_fraction']

_SCHEDULE = ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32), (4000, 64), (6000, 128), (8000, 256))


def square_fraction(p_init: float, iteration: int, n_queries: int, rescale_schedule: bool = False) -> float:
    """Fraction p of the image area the square covers at `iteration` (0-based), the paper's piecewise schedule."""
    if rescale_schedule:
        iteration = int(iteration / n_queries * 10000)
    divisor = 512
    for limit, div in _SCHEDULE:
        if iteration <= limit:
            divisor = div
            break
    return p_init / divisor


def _random_signs(shape, like: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    return torch.where(uniform(shape, like, generator) < 0.5, -1.0, 1.0).to(like.dtype)


def _square_run(
        model: nn.Module,
        x: torch.Tensor,
        labels: torch.Tensor,
        rows: torch.Tensor,
        best: BestIterate,
        space: InputSpace,
        radius: torch.Tensor,
        n_queries: int,
        p_init: float,
        rescale_schedule: bool,
        generator: Optional[torch.Generator],
        autocast_dtype: Optional[torch.dtype],
        tick: Callable[[int], None],
) -> None:
    """One random-search run on batch rows `rows` (`x` and `labels` restricted to them), recording into `best`;
    ``tick(queries)`` before each query over the batch."""
    b, c, h, w = x.shape
    x_best = space.clamp(x + radius * _random_signs((b, c, 1, w), x, generator))
    logits = forward_logits(model, x_best, autocast_dtype)
    margin_best, tolerance = margin(logits, labels), rounding_tolerance(logits, autocast_dtype)
    fooled = -margin_best > tolerance
    best.update(rows, x_best, fooled, -margin_best)
    grid_h = torch.arange(h, device=x.device)
    grid_w = torch.arange(w, device=x.device)
    for i in range(n_queries - 2):
        tick(i + 2)  # the clean and the start queries came first
        if fooled.any():
            keep = ~fooled
            x, labels, rows, x_best = x[keep], labels[keep], rows[keep], x_best[keep]
            margin_best, tolerance = margin_best[keep], tolerance[keep]
            if not rows.numel():
                return
        n = x.shape[0]
        side = max(int(round(math.sqrt(square_fraction(p_init, i, n_queries, rescale_schedule) * h * w))), 1)
        side = min(side, h, w)
        top = (uniform((n,), x, generator) * (h - side + 1)).long().clamp_max(h - side)
        left = (uniform((n,), x, generator) * (w - side + 1)).long().clamp_max(w - side)
        in_rows = (grid_h >= top[:, None]) & (grid_h < top[:, None] + side)
        in_cols = (grid_w >= left[:, None]) & (grid_w < left[:, None] + side)
        window = (in_rows[:, None, :, None] & in_cols[:, None, None, :]).to(x.dtype)
        x_new = project(x_best + window * 2.0 * radius * _random_signs((n, c, 1, 1), x, generator), x, space, radius)
        logits = forward_logits(model, x_new, autocast_dtype)
        margin_new = margin(logits, labels)
        improved = margin_new < margin_best
        x_best = torch.where(improved.view(-1, 1, 1, 1), x_new, x_best)
        margin_best = torch.where(improved, margin_new, margin_best)
        tolerance = torch.where(improved, rounding_tolerance(logits, autocast_dtype), tolerance)
        fooled = -margin_best > tolerance
        best.update(rows, x_best, fooled, -margin_best)


def square(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        n_queries: int = 5000,
        p_init: float = 0.8,
        n_restarts: int = 1,
        rescale_schedule: bool = False,
        generator: Optional[torch.Generator] = None,
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Untargeted Square attack, L∞, by random search on the margin loss; forward passes only.

    Args:
        model: Model in eval mode (queried without gradients).
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: L∞ budget on the 0-255 scale.
        n_queries: Forward passes per sample and restart, the clean query included (AutoAttack: 5000; >= 2).
        p_init: Initial fraction of the image area changed per query (0.8).
        n_restarts: Restarts on the samples still robust, each with the full query budget (1).
        rescale_schedule: Map the 10000-query schedule of p onto `n_queries` (AutoAttack standard: no).
        generator: Source of the stripes, window positions and signs.
        autocast_dtype: Forward under autocast at this dtype.
        progress: Where to report each restart's queries (`progress.AttackProgress`), if anywhere.

    Returns:
        Adversarial inputs (normalized, `x`'s shape and dtype): per sample the first fooling point, else the one
        with the lowest margin; misclassified clean samples unchanged.

    Example:
        >>> with attack_context(model):
        ...     x_adv = square(model, x, y, space=InputSpace.from_model(model), eps=4, n_queries=5000)
    """
    if eps < 0 or n_queries < 2 or n_restarts < 1 or not 0.0 < p_init <= 1.0:
        raise ValueError(f'Square needs eps >= 0, n_queries >= 2, n_restarts >= 1 and p_init in (0, 1], got {eps}, '
                         f'{n_queries}, {n_restarts}, {p_init}.')
    x, labels, dtype = attack_inputs(x, y)
    radius = space.linf_budget(eps, x)
    _, best = clean_record(model, x, labels, autocast_dtype=autocast_dtype)
    with torch.no_grad():
        for restart, rows in enumerate(best.restarts(n_restarts)):
            tick = reporter(progress, 'square', restart_part(restart, n_restarts), n_queries, 'queries')
            _square_run(model, x[rows], labels[rows], rows, best, space, radius, n_queries, p_init, rescale_schedule,
                        generator, autocast_dtype, tick)
    return best.x.to(dtype)


@register_attack('square')
@attack_dataclass
class Square(EvalAttack):
    """Square attack, L∞ (see `square`); defaults: AutoAttack standard at RobustBench's ImageNet ε=4/255.

    Args:
        eps: L∞ budget on the 0-255 scale (4).
        n_queries: Forward passes per sample (5000).
        p_init: Initial square area fraction (0.8).
        n_restarts: Restarts (1).
        rescale_schedule: Rescale the p schedule to `n_queries` (False, as AutoAttack).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'Square'

    eps: float = 4.0
    n_queries: int = 5000
    p_init: float = 0.8
    n_restarts: int = 1
    rescale_schedule: bool = False

    core = staticmethod(square)
    threat = 'black-box'
    step_description = 'random ±ε squares (no gradient)'

    def check_options(self) -> None:
        if self.n_queries < 2 or self.n_restarts < 1 or not 0.0 < self.p_init <= 1.0:
            raise ValueError(f'Square needs n_queries >= 2, n_restarts >= 1 and p_init in (0, 1], got '
                             f'{self.n_queries}, {self.n_restarts}, {self.p_init}.')
