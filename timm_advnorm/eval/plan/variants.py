"""The functions an evaluation attacks: a plain model, or one inference mode of a mixture-BN model.

A mixture-BN model (Xie & Yuille 2020) is several classifiers in one: the clean branch, the adversarial branch, and
for any γ in (0, 1) a feature-level interpolation (the ``mix`` route, NoFrost's "MBNAT (all)") or a logit-level one
(`LogitInterpolation`, NoFrost's default "MBNAT (logits)", Appendix A). Sweeping γ traces the clean-vs-robust
trade-off of NoFrost Fig. 2. Each variant is attacked as itself: the attack differentiates through exactly the
function that is then scored.

A variant sets its route on the model for the whole evaluation (`Variant.activate`) instead of wrapping the model in
a module that switches routes inside `forward`: an attack folding BN into convolutions reads the route when it
folds, so the route must already be in place.
"""
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

import torch.nn as nn

from ...layers import LogitInterpolation, has_mixture_bn, route

__all__ = ['Variant', 'KINDS', 'INTERPOLATIONS', 'DEFAULT_GAMMAS', 'model_variants']

KINDS = ('model', 'clean', 'adv', 'mix', 'logits')
INTERPOLATIONS = ('mix', 'logits')
#: The adversarial-branch weights evaluated unless given: both branches.
DEFAULT_GAMMAS = (0.0, 1.0)


@dataclass(frozen=True)
class Variant:
    """One classifier to evaluate.

    Args:
        kind: ``model`` (a model without mixture BN, as is), ``clean`` / ``adv`` (one branch), ``mix`` (feature
            interpolation) or ``logits`` (logit interpolation).
        gamma: Weight of the adversarial branch (``clean``: 0, ``adv``: 1, interpolations: in (0, 1)).
    """

    kind: str
    gamma: Optional[float] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f'Variant kind must be one of {KINDS}, got {self.kind!r}.')
        if self.kind in INTERPOLATIONS and (self.gamma is None or not 0.0 < self.gamma < 1.0):
            raise ValueError(f'A {self.kind} variant needs gamma in (0, 1), got {self.gamma}.')

    @property
    def name(self) -> str:
        """Results key: ``model``, ``clean``, ``adv``, ``mix@0.5``, ``logits@0.5``."""
        return f'{self.kind}@{self.gamma:g}' if self.kind in INTERPOLATIONS else self.kind

    @property
    def adv_weight(self) -> Optional[float]:
        """γ on the clean (0) to adversarial (1) axis of the trade-off plot; ``None`` for plain models."""
        return {'model': None, 'clean': 0.0, 'adv': 1.0}.get(self.kind, self.gamma)

    @contextmanager
    def activate(self, model: nn.Module) -> Iterator[nn.Module]:
        """Put `model` in this variant's route and yield the module to evaluate and attack; restore on exit."""
        if self.kind == 'model':
            yield model
        elif self.kind == 'logits':
            with route(model, 'clean'):
                yield LogitInterpolation(model, self.gamma)
        else:
            with route(model, self.kind, gamma=self.gamma if self.kind == 'mix' else None):
                yield model

    def to_dict(self):
        """JSON-serialisable description."""
        return dict(name=self.name, kind=self.kind, gamma=self.adv_weight)


def model_variants(
        model: nn.Module,
        gammas: Optional[Sequence[float]] = None,
        interpolations: Optional[Sequence[str]] = None,
) -> List[Variant]:
    """The variants to evaluate for `model`.

    A model without mixture BN has one variant. A mixture-BN model gets, for every γ: the clean branch at 0, the
    adversarial branch at 1, and one variant per interpolation in between.

    Args:
        model: The model.
        gammas: Adversarial-branch weights in [0, 1] (``--gammas``); None: `DEFAULT_GAMMAS`.
        interpolations: Which of ``mix`` and ``logits`` to evaluate at interior γ (``--interpolations``); None:
            both.

    Raises:
        ValueError: γ outside [0, 1] or an unknown interpolation; γ or interpolations given for a model without
            mixture BN, or interpolations without an interior γ (they would be ignored without a word).
    """
    if not has_mixture_bn(model):
        given = [option for option, value in (('--gammas', gammas), ('--interpolations', interpolations))
                 if value is not None]
        if given:
            raise ValueError(f'{" and ".join(given)}: the model has no mixture BN (no clean and adversarial branches '
                             f'to weigh), so it is evaluated as itself; drop {" and ".join(given)}')
        return [Variant('model')]
    gammas = DEFAULT_GAMMAS if gammas is None else gammas
    if interpolations is not None and not any(0.0 < float(g) < 1.0 for g in gammas):
        raise ValueError(f'--interpolations apply at gammas strictly between 0 and 1; --gammas '
                         f'{" ".join(f"{float(g):g}" for g in gammas)} has none, so they would not be evaluated')
    interpolations = INTERPOLATIONS if interpolations is None else interpolations
    for name in interpolations:
        if name not in INTERPOLATIONS:
            raise ValueError(f'Unknown interpolation {name!r}, expected one of {INTERPOLATIONS}.')
    variants = []
    for gamma in sorted(set(float(g) for g in gammas)):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f'gamma must be in [0, 1], got {gamma}.')
        if gamma == 0.0:
            variants.append(Variant('clean'))
        elif gamma == 1.0:
            variants.append(Variant('adv'))
        else:
            variants.extend(Variant(kind, gamma) for kind in interpolations)
    if not variants:
        raise ValueError('No variant to evaluate: give at least one gamma.')
    return variants
