"""What evaluation attacks share: running BN statistics, per-sample best iterates and dropping fooled samples.

Evaluation keeps per sample any iterate that fools the model and stops attacking that sample, so later iterations
run on fewer rows. Dropping rows changes nothing for the others only if rows are independent, which
holds in eval mode (running BN statistics): evaluation attacks therefore refuse ``bn_stats='batch'``. A sample the
model already misclassifies is returned unchanged: robust accuracy can never exceed clean accuracy.

"Fooled", for what an attack records and stops attacking, means fooled past `core.rounding_tolerance`: the attack's
forwards (BN folded, bf16, pruned batches) round differently from the final scoring, and a sample dropped at a
rounding-sized margin could be scored robust (`best_iterate.BestIterate` keeps the candidates).
"""
import logging
from typing import Any, Callable, ClassVar, Iterator, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn

from .base import Attack, attack_dataclass, attack_inputs, forward_logits
from .best_iterate import BestIterate
from .core import is_clearly_fooled
from .pgd import pgd
from .progress import restart_part

__all__ = ['EvalAttack', 'NoiseAttack', 'forward_logits', 'clean_record', 'attack_correct_only', 'pgd_correct_only',
           'target_rounds', 'TargetRestart', 'target_restarts']

_logger = logging.getLogger(__name__)


def clean_record(
        model: nn.Module,
        x: torch.Tensor,
        labels: torch.Tensor,
        targets: Optional[torch.Tensor] = None,
        autocast_dtype: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, BestIterate]:
    """The clean logits (B, K) and the record an evaluation attack starts from: the clean inputs, with the samples
    the model already misclassifies clearly (with `targets`: classifies as their target) marked fooled, so that they
    are never attacked and come back unchanged."""
    logits = forward_logits(model, x, autocast_dtype)
    return logits, BestIterate(x, is_clearly_fooled(logits, labels, targets, autocast_dtype))


def attack_correct_only(
        model: nn.Module,
        x: torch.Tensor,
        labels: torch.Tensor,
        attack: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        autocast_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Run ``attack(x_rows, labels_rows)`` on the correctly classified samples only; return the others unchanged.

    For attack cores that start away from the clean input (a random start may be classified correctly where the
    clean input is not): the output then never scores a misclassified sample as robust.
    """
    logits = forward_logits(model, x, autocast_dtype)
    rows = (~is_clearly_fooled(logits, labels, autocast_dtype=autocast_dtype)).nonzero().squeeze(1)
    x_adv = x.clone()
    if rows.numel():
        x_adv[rows] = attack(x[rows], labels[rows]).to(x.dtype)
    return x_adv


def pgd_correct_only(
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        autocast_dtype: Optional[torch.dtype] = None,
        **pgd_kwargs: Any,
) -> torch.Tensor:
    """`pgd` in evaluation mode (``best_iterate``) on the correctly classified samples only (`attack_correct_only`).

    The core of the PGD-based evaluation attacks (BIM, CW-L∞); `y` may be soft targets (their argmax is attacked).
    """
    x, labels, dtype = attack_inputs(x, y)
    x_adv = attack_correct_only(
        model, x, labels,
        lambda x_rows, y_rows: pgd(
            model, x_rows, y_rows, best_iterate=True, autocast_dtype=autocast_dtype, **pgd_kwargs),
        autocast_dtype)
    return x_adv.to(dtype)


def target_rounds(
        clean_logits: torch.Tensor,
        labels: torch.Tensor,
        targets: Optional[torch.Tensor],
        n_target_classes: int,
) -> List[Tuple[torch.Tensor, bool]]:
    """The rounds of a targeted evaluation attack: per round, a target for every sample and whether it must be hit.

    Given `targets`: one round toward them, and a sample counts as fooled only once classified as its target.
    Otherwise AutoAttack's scheme (Croce & Hein, ICML 2020): round k attacks the class ranked (k+1)-th by the clean
    logits, for k = 1..n_target_classes (at most K - 1 rounds for K classes), and misclassification is success.
    """
    if targets is not None:
        if (targets == labels).any():
            raise ValueError('Targets must differ from the labels.')
        return [(targets, True)]
    num_classes = clean_logits.shape[1]
    if n_target_classes >= num_classes:
        _logger.warning('%d target classes requested but only %d other classes exist; using %d.',
                        n_target_classes, num_classes - 1, num_classes - 1)
    ranked = clean_logits.argsort(dim=1, descending=True)
    return [(ranked[:, rank], False) for rank in range(1, min(n_target_classes, num_classes - 1) + 1)]


class TargetRestart(NamedTuple):
    """One run of a targeted evaluation attack (`target_restarts`).

    Attributes:
        restart: Index of the restart within its round (0 for the first).
        rows: Batch indices of the samples still robust, the ones the run attacks.
        labels_and_targets: Per row its label and its target (N, 2).
        hit_targets: The targets again where a sample counts as fooled only once classified as its target (given
            targets), else None (any misclassification counts).
        part: Which run it is, for progress reports (``target 3/9, restart 1/1``; ``given targets, restart 1/1``).
    """

    restart: int
    rows: torch.Tensor
    labels_and_targets: torch.Tensor
    hit_targets: Optional[torch.Tensor]
    part: str


def target_restarts(
        best: BestIterate,
        clean_logits: torch.Tensor,
        labels: torch.Tensor,
        targets: Optional[torch.Tensor],
        n_target_classes: int,
        n_restarts: int,
) -> Iterator[TargetRestart]:
    """The runs of a targeted evaluation attack: per round of `target_rounds`, per restart (`BestIterate.restarts`),
    the samples of `best` still robust and their targets."""
    rounds = target_rounds(clean_logits, labels, targets, n_target_classes)
    for index, (round_targets, must_hit) in enumerate(rounds):
        which = 'given targets' if targets is not None else f'target {index + 1}/{len(rounds)}'
        for restart, rows in enumerate(best.restarts(n_restarts)):
            target = round_targets[rows]
            yield TargetRestart(restart, rows, torch.stack([labels[rows], target], dim=1), target if must_hit else None,
                                f'{which}, {restart_part(restart, n_restarts)}')


class EvalAttack(Attack):
    """Base of evaluation attacks: always running BN statistics; untargeted unless the subclass says otherwise.

    Args:
        space: The model's input normalization.
        eps: Budget on the 0-255 pixel scale.
        bn_stats: Must be ``running`` (accepted so every registered attack takes the same configuration keys).
        autocast_dtype, seed, fold_bn: See `Attack`.
    """

    accepts_targets = False
    #: Evaluation semantics (best iterate, fooled samples dropped, running statistics) make no training examples.
    trains: ClassVar[bool] = False
    #: Per sample the first iterate that fools the model, else the best candidate (`best_iterate.BestIterate`).
    best_iterate = True

    def __post_init__(self):
        if self.bn_stats != 'running':
            raise ValueError(f'{type(self).__name__} is an evaluation attack: it needs bn_stats="running" (eval mode), '
                             f'got {self.bn_stats!r}.')
        super().__post_init__()


@attack_dataclass
class NoiseAttack(EvalAttack):
    """Base of the perturbations that do not use the model (noise, corruptions): no ε budget and nothing to fold.

    Args:
        eps: Unused (no budget); accepted so every registered attack takes the same keys.
        fold_bn: Unused (the model is not run).
        space, autocast_dtype, seed, bn_stats: See `EvalAttack` (only `seed` matters).
    """

    eps: float = 0.0
    fold_bn: bool = False

    threat: ClassVar[str] = 'noise'

    def extra_repr(self) -> str:
        """The perturbation's own options and its seed (it has no budget and runs no model)."""
        return self.options_repr() + f'seed={self.seed}'
