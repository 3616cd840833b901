"""Per-sample record of what an evaluation attack returns: the iterate that fools the model, else the closest one.

An evaluation attack offers every iterate it computes; the record keeps, per sample, the first iterate that fools
the model clearly (past `core.rounding_tolerance`, so the final scoring agrees), after which the attack stops
attacking that sample. Until then it keeps the best candidate, ranked first by `core.fooling_tier`: an iterate the
attack saw fooled by less than the tolerance ranks above the rest (the final scoring may still count it), then, for
a targeted attack, one misclassified off its target (it still lowers the reported accuracy, so the accuracy is never
above the last iterate's), then correctly classified ones; within a tier the highest objective wins.
"""
from typing import Iterator, Optional

import torch

from .core import fooling_tier, is_clearly_fooled

__all__ = ['BestIterate']


class BestIterate:
    """Per-sample record of an evaluation attack's output.

    Args:
        x: Starting inputs (B, ...); a sample nothing improves on is returned as given here.
        fooled: Samples already clearly fooled by `x` itself (B,) bool, e.g. misclassified clean inputs; they are
            never updated.
    """

    def __init__(self, x: torch.Tensor, fooled: Optional[torch.Tensor] = None):
        batch = x.shape[0]
        self.x = x.clone()
        self.fooled = torch.zeros(batch, dtype=torch.bool, device=x.device) if fooled is None else fooled.clone()
        self.tier = torch.zeros(batch, dtype=torch.int8, device=x.device)
        self.objective = torch.full((batch,), -float('inf'), dtype=torch.float32, device=x.device)

    def update(
            self,
            rows: torch.Tensor,
            x_adv: torch.Tensor,
            fooled: torch.Tensor,
            objective: Optional[torch.Tensor] = None,
            tier: Optional[torch.Tensor] = None,
    ) -> None:
        """Offer iterates `x_adv` for samples `rows` (indices into the batch).

        Args:
            rows: Batch indices (N,) of the offered iterates.
            x_adv: Iterates (N, ...).
            fooled: Whether each iterate clearly fools the model (N,), `core.is_clearly_fooled`.
            objective: The attack's objective at each iterate (N,), higher is better; ``None`` offers only fooling
                iterates.
            tier: Rank of each iterate before the objective (N,), `core.fooling_tier`; ``None`` when the objective
                alone ranks the candidates.
        """
        was_fooled = self.fooled[rows]
        better = fooled & ~was_fooled
        if objective is not None:
            objective = objective.float()
            tier = torch.zeros_like(fooled, dtype=torch.int8) if tier is None else tier.to(torch.int8)
            best_tier = self.tier[rows]
            candidate = ~fooled & ~was_fooled
            better |= candidate & ((tier > best_tier) | ((tier == best_tier) & (objective > self.objective[rows])))
            self.objective[rows[better]] = objective[better]
            self.tier[rows[better]] = tier[better]
        self.x[rows[better]] = x_adv[better].to(self.x.dtype)
        self.fooled[rows] = was_fooled | fooled

    def update_from_logits(
            self,
            rows: torch.Tensor,
            x_adv: torch.Tensor,
            logits: torch.Tensor,
            labels: torch.Tensor,
            objective: torch.Tensor,
            targets: Optional[torch.Tensor] = None,
            autocast_dtype: Optional[torch.dtype] = None,
    ) -> torch.Tensor:
        """`update` with iterates judged by the logits the attack's own forward gave them: fooled past the rounding
        tolerance (`core.is_clearly_fooled`), ranked by `core.fooling_tier`, then by `objective`.

        Args:
            rows, x_adv, objective: See `update`.
            logits: The attack's logits at `x_adv` (N, C).
            labels: True classes (N,).
            targets: Classes a sample must be classified as to count as fooled (N,); None: any misclassification.
            autocast_dtype: The precision of the forward that gave `logits` (sets the rounding tolerance).

        Returns:
            Which iterates clearly fool the model (N,) bool.
        """
        fooled = is_clearly_fooled(logits, labels, targets, autocast_dtype)
        self.update(rows, x_adv, fooled, objective, fooling_tier(logits, labels, targets))
        return fooled

    def robust_rows(self) -> torch.Tensor:
        """Indices of the samples not clearly fooled yet."""
        return (~self.fooled).nonzero().squeeze(1)

    def restarts(self, n_restarts: int) -> Iterator[torch.Tensor]:
        """For each of `n_restarts` restarts, the indices of the samples not fooled yet; stops once none is left."""
        for _ in range(n_restarts):
            rows = self.robust_rows()
            if not rows.numel():
                return
            yield rows
