"""A paper's claims checked against a study's cells, in direction and in size.

A finding compares the cells matching its ``higher`` side with those matching its ``lower`` side on one metric, or,
for a single table cell the paper's text relies on, reads the cells matching ``at``. Its measure is the gap (higher
minus lower), the ratio (higher over lower) or the value; ours is taken seed by seed where both sides have one cell
per seed (the seeds pair up as the cells do), else from the sides' means, with its standard error over seeds.

* **Direction**: the gap is positive (the ratio above 1). ``within noise`` when the gap is no larger than the seeds'
  spread or, for an accuracy, two images of the evaluated subset. A claim of no difference (``direction: false``)
  and a value have no direction.
* **Size**: ours lies inside the paper's interval (its value ± its standard error) widened by our standard error,
  or, where the finding states a relative ``tolerance``, within that fraction of the paper's value.
* **Not testable**: a cell the finding reads did not train (its clean accuracy is below the study's ``min_clean``).
"""
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Tuple

from .cells import Cell, select_cells
from .spec import Finding

if TYPE_CHECKING:
    from .table import CellResult

__all__ = ['Estimate', 'FindingResult', 'check_finding', 'format_estimate', 'format_paper_value', 'is_loss',
           'number_digits', 'summarize_verdicts', 'NOISE_IMAGES']

#: Gaps of this many images or fewer are noise whatever the seeds say.
NOISE_IMAGES = 2


def is_loss(metric: str) -> bool:
    """Whether `metric` is a mean loss (else an accuracy in percent)."""
    return metric.startswith('loss:')


def number_digits(metric: str, measure: str, paper_se: float = 0.0) -> int:
    """Decimals a finding's numbers are written with: three for losses and ratios, one for accuracies (points), and
    as many as the paper's standard error needs to show its first digit, up to three (0.08 ± 0.05 is not 0.1 ± 0.1)."""
    digits = 3 if is_loss(metric) or measure == 'ratio' else 1
    if paper_se > 0:
        digits = max(digits, min(3, -math.floor(math.log10(paper_se))))
    return digits


def format_paper_value(value: float, se: float, tolerance: Optional[float], digits: int) -> str:
    """The paper's value of a measure as the size verdict reads it: ``value ± standard error`` (the value alone where
    the paper gives no uncertainty, se 0), then the relative tolerance where the finding states one."""
    text = f'{value:.{digits}f}' + (f' ± {se:.{digits}f}' if se else '')
    return text if tolerance is None else f'{text} (tolerance {tolerance:.0%})'


def format_estimate(value: float, se: float, n: int, digits: int) -> str:
    """Ours as the tables write it: ``value ± standard error (n=N)``."""
    return f'{value:.{digits}f} ± {se:.{digits}f} (n={n})'


def summarize_verdicts(verdicts: Sequence[Tuple[str, str]]) -> str:
    """The findings' (direction, size) verdicts counted, each count with its denominator: direction (of the findings
    with one), size (of those with a paper value and a defined measure), and the findings not run or not testable."""
    def count(values: Sequence[str], word: str) -> int:
        return sum(v.startswith(word) for v in values)
    directions = [d for d, _ in verdicts]
    directed = [d for d in directions if d not in ('n/a', 'not run', 'not testable')]
    sized = [s for _, s in verdicts if s not in ('—', 'not run', 'not testable') and not s.startswith('no ratio')]
    within = count(directed, 'yes (within noise)') + count(directed, 'no (within noise)')
    return (f'{len(verdicts)} findings. Direction held in {count(directed, "yes")} of {len(directed)} with a '
            f'direction ({within} of the {len(directed)} within noise); size held in {count(sized, "yes")} of '
            f'{len(sized)} with a paper value; {directions.count("not run")} not run, '
            f'{directions.count("not testable")} not testable (a cell did not train).')


@dataclass(frozen=True)
class Estimate:
    """A measured quantity: its mean over `n` seeds (or sides' means) and the standard error of that mean."""

    value: float
    se: float
    n: int


def _mean_se(values: Sequence[float]) -> Estimate:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return Estimate(statistics.fmean(values), se, len(values))


def _combine(measure: str, higher: Estimate, lower: Estimate) -> Estimate:
    """`measure` of two independent estimates, its standard error by error propagation."""
    n = min(higher.n, lower.n)
    if measure == 'gap':
        return Estimate(higher.value - lower.value, math.hypot(higher.se, lower.se), n)
    ratio = higher.value / lower.value  # the delta method's |r|·√((σh/h)² + (σl/l)²), defined at h = 0 too
    return Estimate(ratio, math.hypot(higher.se, ratio * lower.se) / abs(lower.value), n)


@dataclass(frozen=True)
class FindingResult:
    """A finding measured.

    Attributes:
        finding: The claim.
        higher: The metric's values on the higher side (the ``at`` cells of a value), one per cell.
        lower: On the lower side (empty for a value).
        seeds_higher: The seed of each value of `higher`.
        seeds_lower: The seed of each value of `lower`.
        noise: An accuracy gap no larger than this (two images, in points) is noise.
        untrained: Whether a cell the finding reads did not train.
    """

    finding: Finding
    higher: Tuple[float, ...]
    lower: Tuple[float, ...]
    seeds_higher: Tuple[int, ...] = ()
    seeds_lower: Tuple[int, ...] = ()
    noise: float = 0.0
    untrained: bool = False

    @property
    def digits(self) -> int:
        """Decimals the finding's numbers are written with (`number_digits`)."""
        expected = self.finding.expected
        return number_digits(self.finding.metric, self.finding.measure, expected.se if expected else 0.0)

    @property
    def measured(self) -> bool:
        return bool(self.higher) and (self.finding.measure == 'value' or bool(self.lower))

    @property
    def undefined(self) -> bool:
        """Whether the measure is a ratio over a lower side that scored 0 (no ratio exists)."""
        return self.finding.measure == 'ratio' and 0.0 in self.lower

    @property
    def ours(self) -> Optional[Estimate]:
        """Our value of the finding's measure, with its standard error (None before both sides are measured, or
        for a ratio over a zero)."""
        if not self.measured or self.undefined:
            return None
        measure = self.finding.measure
        if measure == 'value':
            return _mean_se(self.higher)
        paired = (len(set(self.seeds_higher)) == len(self.seeds_higher) == len(self.higher)
                  and sorted(self.seeds_higher) == sorted(self.seeds_lower) and len(self.lower) == len(self.higher))
        if paired:
            lower = dict(zip(self.seeds_lower, self.lower))
            per_seed = [h - lower[s] if measure == 'gap' else h / lower[s]
                        for h, s in zip(self.higher, self.seeds_higher)]
            return _mean_se(per_seed)
        return _combine(measure, _mean_se(self.higher), _mean_se(self.lower))

    @property
    def gap(self) -> Optional[float]:
        """Mean of the higher side minus mean of the lower side (None for a value, or before both are measured)."""
        if not self.measured or self.finding.measure == 'value':
            return None
        return statistics.fmean(self.higher) - statistics.fmean(self.lower)

    @property
    def verdict(self) -> str:
        """Whether the direction held: ``yes``/``no`` (``(within noise)`` when the gap is no larger than the seeds'
        spread or two images), ``n/a`` for a claim without direction, ``not run``, ``not testable``."""
        if not self.measured:
            return 'not run'
        if self.untrained:
            return 'not testable'
        if self.finding.measure == 'value' or not self.finding.direction:
            return 'n/a'
        held = 'yes' if self.gap > 0 else 'no'
        spread = max(statistics.stdev(side) if len(side) > 1 else 0.0 for side in (self.higher, self.lower))
        return f'{held} (within noise)' if abs(self.gap) <= max(spread, self.noise) else held

    @property
    def size_verdict(self) -> str:
        """Whether the size held: ``yes``/``no`` against the paper's value (``—`` where the finding gives none),
        ``not run``, ``not testable``."""
        expected = self.finding.expected
        if expected is None:
            return '—'
        if not self.measured:
            return 'not run'
        if self.untrained:
            return 'not testable'
        if self.undefined:
            return 'no ratio (the lower side scored 0)'
        ours = self.ours
        off = abs(ours.value - expected.value)
        if off <= expected.se + ours.se:
            return 'yes'
        tolerance = self.finding.tolerance
        if tolerance is not None and off <= tolerance * abs(expected.value):
            return f'yes (within {tolerance:.0%})'
        return 'no'

    def format_ours(self) -> str:
        """Ours as ``value ± standard error (n=N)``, or ``—``."""
        ours = self.ours
        if ours is None:
            return '—'
        return format_estimate(ours.value, ours.se, ours.n, self.digits)

    def format_paper(self) -> str:
        """The paper's value of the measure (`format_paper_value`), or its numbers as it prints them."""
        expected = self.finding.expected
        if expected is None:
            return self.finding.paper
        return format_paper_value(expected.value, expected.se, self.finding.tolerance, self.digits)


def check_finding(finding: Finding, cells: Sequence[Cell], results: Mapping[str, 'CellResult'],
                  min_clean: Optional[float] = None) -> FindingResult:
    """Measure `finding` on the evaluated cells among `cells` (`results` by cell id); a cell whose clean accuracy is
    below `min_clean` did not train."""
    selectors = (finding.higher,) if finding.measure == 'value' else (finding.higher, finding.lower)
    sides = [[results[c.id] for c in select_cells(cells, selector) if c.id in results] for selector in selectors]
    metric = finding.metric
    higher, lower = ([[r for r in side if metric in r.metrics] for side in sides] + [[]])[:2]
    samples = [r.samples for r in higher + lower]
    noise = 100.0 * NOISE_IMAGES / min(samples) if samples and not is_loss(metric) else 0.0
    untrained = min_clean is not None and any(r.metrics['clean'] < min_clean for r in higher + lower)
    return FindingResult(finding, tuple(r.metrics[metric] for r in higher), tuple(r.metrics[metric] for r in lower),
                         tuple(r.cell.seed for r in higher), tuple(r.cell.seed for r in lower), noise, untrained)
