"""Sanity probes sized to the evaluation they check: by default at most a quarter of the requested attacks' cost.

The complete battery (`plan.SanityBudget`: 64 samples, a PGD-10 ε-sweep of five points, PGD-40 and a 400-query
Square) costs about 37 000 passes: twenty times a PGD-20 on 200 images. `fit_sanity` keeps what the checks compare
and spends less, in this order:

1. fewer samples, down to `MIN_SAMPLES` (every probe as asked);
2. then, on `MIN_SAMPLES` samples, fewer Square queries (down to `MIN_QUERIES`), fewer PGD iterations (down to
   `MIN_STEPS`; the iteration check still compares N with 4N) and fewer ε points (the protocol's ε, 4x it and the
   huge budget: still a curve);
3. a probe that does not fit even so is not run, and its check reported as not run, from the last of
   `plan.SANITY_PROBES` (Square, then the 4x-iteration PGD, the ε-sweep, the huge budget, the input gradient and the
   determinism probe): each keeps those before it, which it compares with.

Below those floors a check would compare nothing (PGD from the clean image needs about 5 iterations to leave no
honest classifier any accuracy at 128/255; Square needs about 100 queries to beat even a masked model reliably;
"0 of 16 survive" is a finding where "0 of 4" is not). Values the user gives (``--sanity-samples`` and the like) are
taken as given and the rest sized around them. Costs are `cost.stage_passes` over the samples each stage covers,
the same count the evaluation's plan prints.
"""
from dataclasses import replace
from typing import Callable, Collection, Optional

from ..protocols.protocol import Protocol
from .cost import stage_kind, stage_passes
from .stage_plan import (
    REDUCED_SANITY_EPS_FACTORS, REDUCED_SANITY_QUERIES, REDUCED_SANITY_SAMPLES, REDUCED_SANITY_STEPS, SANITY_PROBES,
    EvalPlan, SanityBudget, sanity_stages)

__all__ = ['fit_sanity', 'sanity_allowance', 'SANITY_SHARE', 'MIN_SAMPLES', 'MIN_STEPS', 'MIN_QUERIES']

#: The sanity probes may cost at most this share of the requested attacks' passes (``--sanity budget``).
SANITY_SHARE = 0.25
#: Fewest samples the budget gives the probes (fewer when the subset is smaller).
MIN_SAMPLES = REDUCED_SANITY_SAMPLES
#: Fewest PGD iterations of the probes' ε-sweep.
MIN_STEPS = REDUCED_SANITY_STEPS
#: Fewest Square queries of the black-box probe.
MIN_QUERIES = REDUCED_SANITY_QUERIES


def sanity_allowance(plan: EvalPlan, num_samples: int) -> float:
    """The passes the probes may spend: `SANITY_SHARE` of the requested attacks' passes on `num_samples` samples."""
    attacks = sum(stage_passes(stage).total for stage in plan.stages if stage_kind(stage) == 'attack')
    return SANITY_SHARE * attacks * num_samples


def _probe_passes(protocol: Protocol, budget: SanityBudget) -> float:
    """Passes of the probes of `budget` (whose samples are at most the subset's)."""
    stages, _ = sanity_stages(protocol, budget)
    return budget.samples * sum(stage_passes(stage).total for stage in stages)


def _largest(low: int, high: int, fits: Callable[[int], bool]) -> Optional[int]:
    """The largest value in ``[low, high]`` that `fits` (monotone: fewer always fits when more does); None if none."""
    if not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _fit_probes(protocol: Protocol, budget: SanityBudget, allowance: float, pinned: Collection[str]
                ) -> Optional[SanityBudget]:
    """`budget`'s probes within `allowance` passes, sized in the module docstring's order; None if they do not fit
    at the floors."""
    def fits(field: str) -> Callable[[int], bool]:
        return lambda value: _probe_passes(protocol, replace(budget, **{field: value})) <= allowance

    floors = dict(samples=MIN_SAMPLES, queries=MIN_QUERIES, steps=MIN_STEPS)
    for field in ('samples', 'queries', 'steps'):
        high = getattr(budget, field)
        low = high if field in pinned else min(floors[field], high)
        value = _largest(low, high, fits(field))
        if value is not None:
            return replace(budget, **{field: value})
        budget = replace(budget, **{field: low})
    fewer_points = replace(budget, eps_factors=REDUCED_SANITY_EPS_FACTORS)
    return fewer_points if _probe_passes(protocol, fewer_points) <= allowance else None


def fit_sanity(plan: EvalPlan, num_samples: int, pinned: Collection[str] = ()) -> EvalPlan:
    """`plan` with its sanity probes sized to at most `SANITY_SHARE` of its requested attacks' cost on a subset of
    `num_samples` samples (see the module docstring); a plan without probes is returned as it is.

    Args:
        plan: A plan with the complete battery (`plan.build_plan`).
        num_samples: Size of the evaluated subset.
        pinned: The budget's fields the user set (``samples``, ``steps``, ``queries``): kept as they are.
    """
    if plan.sanity_budget is None:
        return plan
    full = replace(plan.sanity_budget, samples=min(plan.sanity_budget.samples, num_samples))
    allowance = sanity_allowance(plan, num_samples)
    budget = None
    for kept in range(len(SANITY_PROBES), 0, -1):
        budget = _fit_probes(plan.protocol, replace(full, probes=SANITY_PROBES[:kept]), allowance, pinned)
        if budget is not None:
            break
    if budget is None:
        budget = replace(full, samples=0, probes=())
    not_run = tuple(probe for probe in SANITY_PROBES if probe not in budget.probes)
    probes, sanity = sanity_stages(plan.protocol, budget, mode='budget', not_run=not_run)
    old = {stage.name for stage in plan.stages if stage_kind(stage) == 'sanity'}
    at = next(i for i, stage in enumerate(plan.stages) if stage.name in old)
    kept = [stage for stage in plan.stages if stage.name not in old]
    return replace(plan, stages=(*kept[:at], *probes, *kept[at:]), sanity=sanity, sanity_budget=budget)
