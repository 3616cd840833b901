"""Basic iterative method (BIM), L∞ and L2, with the settings of Galloway et al.

Kurakin, Goodfellow & Bengio, *Adversarial examples in the physical world* (ICLR workshop 2017): iterated gradient
steps from the clean image (no random start), each projected onto the ε-ball and the image box. Galloway et al.,
*Batch normalization is a cause of adversarial vulnerability* (ICML workshop 2019), §3: 20 iterations of step ε/20
with ε∞ = 0.03, and BIM-L2 with ε2 = ε∞·√d for input dimension d (`galloway_l2_eps`). The paper standardizes the
inputs, so the evaluation reads ε∞ = 0.03 in units of the standardized input, resolved from the model's std: the
``galloway`` protocol, and ``--attacks bim-linf``/``bim-l2`` without ``--attack-eps`` (0.03·std·255: 2.357 with
MNIST's std, 1.729 with ImageNet's). An attack built here without `eps` does not know which input std the
budget is of, and takes the [0, 1] pixel reading, 0.03·255 = 7.65 on the 0-255 scale (the same for inputs of std 1).

L2 budgets are norms on the [0, 1] pixel scale, given times 255 (`space.py`). Evaluation semantics (`pgd` with
``best_iterate``): per sample the first fooling iterate, else the highest-loss one; fooled samples leave the batch;
misclassified clean samples are returned unchanged.
"""
import math
from typing import ClassVar, Optional, Sequence

import torch
import torch.nn as nn

from .base import NORMS, STEP_DIRECTIONS, attack_dataclass
from .eval_attack import EvalAttack, pgd_correct_only
from .progress import ProgressFn
from .registry import register_attack
from .space import PIXEL_SCALE, InputSpace

__all__ = ['bim', 'BIMLinf', 'BIML2', 'galloway_l2_eps', 'GALLOWAY_EPS', 'GALLOWAY_EPS_LINF']

#: Galloway et al.'s ε∞ (§3), in units of the standardized input.
GALLOWAY_EPS = 0.03
#: ... read on the [0, 1] pixel scale, on the 0-255 scale: the budget of a BIM built without one.
GALLOWAY_EPS_LINF = GALLOWAY_EPS * PIXEL_SCALE


def galloway_l2_eps(eps_linf: float, input_size: Sequence[int]) -> float:
    """Galloway et al.'s L2 budget ``ε2 = ε∞·√d`` (d = C·H·W of `input_size`), on the same scale as `eps_linf`."""
    return eps_linf * math.sqrt(math.prod(input_size))


def bim(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        space: InputSpace,
        eps: float,
        steps: int = 20,
        step: Optional[float] = None,
        norm: str = 'linf',
        autocast_dtype: Optional[torch.dtype] = None,
        progress: Optional[ProgressFn] = None,
) -> torch.Tensor:
    """Untargeted BIM on the cross-entropy: sign-gradient (L∞) or normalized-gradient (L2) steps from the clean image.

    Args:
        model: Model in eval mode.
        x: Normalized inputs (B, C, H, W).
        y: Labels (B,) or soft targets (B, C).
        space: The model's input normalization.
        eps: Budget on the 0-255 scale (L2: pixel-scale norm times 255).
        steps: Iterations (Galloway: 20).
        step: Step on the scale of `eps`; default ``eps / steps`` (Galloway).
        norm: ``linf`` or ``l2``.
        autocast_dtype: Forward under autocast at this dtype; loss and gradient stay fp32.
        progress: Where to report the iterations (`progress.AttackProgress`, as PGD's), if anywhere.

    Returns:
        Adversarial inputs (normalized, `x`'s shape and dtype).

    Example:
        >>> with attack_context(model):
        ...     x_adv = bim(model, x, y, space=space, eps=galloway_l2_eps(7.65, x.shape[1:]), norm='l2')
    """
    if norm not in NORMS:
        raise ValueError(f'norm must be one of {NORMS}, got {norm!r}.')
    if steps < 1 or (step is not None and step < 0):
        raise ValueError(f'BIM needs steps >= 1 and step >= 0, got {steps}, {step}.')
    return pgd_correct_only(
        model, x, y, space=space, eps=eps, step=eps / steps if step is None else step, steps=steps, norm=norm,
        random_start=False, autocast_dtype=autocast_dtype, progress=progress)


@attack_dataclass
class _BIM(EvalAttack):
    eps: Optional[float] = None
    steps: int = 20
    step: Optional[float] = None

    norm: ClassVar[str] = 'linf'
    default_eps: ClassVar[float] = GALLOWAY_EPS_LINF
    core = staticmethod(bim)

    def __post_init__(self):
        if self.eps is None:
            self.eps = self.default_eps
        super().__post_init__()

    def check_options(self) -> None:
        if self.steps < 1 or (self.step is not None and self.step < 0):
            raise ValueError(f'BIM needs steps >= 1 and step >= 0, got {self.steps}, {self.step}.')

    @property
    def step_size(self) -> float:
        """`step`, or ``eps / steps`` by default (Galloway et al.)."""
        return self.eps / self.steps if self.step is None else self.step

    @property
    def step_description(self) -> str:
        """``sign step`` or ``L2 step``, with ``ε/N`` when the size is the default."""
        return STEP_DIRECTIONS[self.norm] + (', ε/N' if self.step is None else '')

    def extra_repr(self) -> str:
        return f'norm={self.norm}, ' + super().extra_repr()


@register_attack('bim-linf')
@attack_dataclass
class BIMLinf(_BIM):
    """BIM-L∞ (see `bim`); defaults: Galloway et al. (ε∞ = 0.03 on the [0, 1] scale, 20 iterations of step ε/20).

    Args:
        eps: L∞ budget on the 0-255 scale (7.65: the [0, 1] reading of 0.03; the evaluation's ``galloway`` protocol
            and ``--attacks bim-linf`` read it of the standardized input, see the module docstring).
        steps: Iterations (20).
        step: Step on the 0-255 scale (default ``eps / steps``).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'BIM-L∞'

    norm = 'linf'


@register_attack('bim-l2')
@attack_dataclass
class BIML2(_BIM):
    """BIM-L2 (see `bim`); Galloway et al.: ε2 = ε∞·√d, 20 iterations of step ε2/20.

    Args:
        eps: L2 radius, pixel-scale norm times 255. Default: Galloway's ``galloway_l2_eps(7.65, (3, 224, 224))``
            (≈ 2968, i.e. 11.6 on the [0, 1] scale) for ImageNet-size inputs; other sizes need their own value.
        steps: Iterations (20).
        step: Step on the scale of `eps` (default ``eps / steps``).
        space, autocast_dtype, seed, bn_stats, fold_bn: See `EvalAttack`.
    """
    title = 'BIM-L2'

    norm = 'l2'
    default_eps = galloway_l2_eps(GALLOWAY_EPS_LINF, (3, 224, 224))
