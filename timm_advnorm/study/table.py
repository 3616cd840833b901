"""A study's results: each cell's numbers read from its run folder, the seeds of a grid point pooled, and the paper's
findings checked against them in direction and size (`timm_advnorm.study.findings`), written as Markdown and CSV.

Numbers that do not hold are shown as they are. Accuracies are in percent with one decimal, mean losses
(``loss:...``) and ratios with three; ± is the standard deviation over seeds, or the standard error of the mean for a
study whose ``spread`` is ``se``.
"""
import csv
import io
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..eval.results.plots import robust_text, suite_text
from ..eval.schema import EvalResults
from ..messages import read_utf8
from .cells import Cell
from .findings import FindingResult, check_finding, is_loss, summarize_verdicts
from .spec import RatioTable, StudySpec

__all__ = ['SPREADS', 'CellResult', 'GroupResult', 'RatioRow', 'Stat', 'group_results', 'metric_title', 'ratio_rows',
           'read_cell', 'summarize_findings', 'write_tables']

#: What ± means in a table, by a study's ``spread``.
SPREADS = {'std': 'standard deviation over seeds', 'se': 'standard error of the mean over seeds'}

@dataclass(frozen=True)
class CellResult:
    """What one evaluated cell measured.

    Attributes:
        metrics: ``clean``, ``robust`` and ``attack:<label>`` accuracies (%) of the reported variant, and its mean
            losses ``loss:clean`` and ``loss:<label>`` where the evaluation recorded them.
        samples: Images evaluated.
        robust: What its robust accuracy is: the attacks that ran with their budgets (`eval.plots.robust_text`).
        vanilla_epochs: The training budget in vanilla epochs: passes per image × epochs.
        train_seconds: Its epochs' training time as the run logged it (``summary.csv``), over every attempt: an
            interrupted and resumed run counts each epoch it finished once; None where the summary lacks it.
        attacks: What each ``attack:<label>`` metric ran, with its budget (`eval.plots.suite_text`).
    """

    cell: Cell
    metrics: Mapping[str, float]
    samples: int
    robust: str
    vanilla_epochs: Optional[float]
    train_seconds: Optional[float]
    attacks: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation (0 for one value) and standard error of some values, written with `digits`
    decimals."""

    values: Tuple[float, ...]
    digits: int = 1

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def se(self) -> float:
        """Standard error of the mean."""
        return self.std / math.sqrt(len(self.values)) if self.values else 0.0

    def format(self, spread: str = 'std') -> str:
        """``mean ± spread (n=N)``, the spread a standard deviation (``std``) or standard error (``se``)."""
        if not self.values:
            return '—'
        width = self.se if spread == 'se' else self.std
        plus_minus = f' ± {width:.{self.digits}f}' if len(self.values) > 1 else ''
        return f'{self.mean:.{self.digits}f}{plus_minus} (n={len(self.values)})'


def _variant(results: Mapping[str, Any], name: Optional[str]) -> Mapping[str, Any]:
    variants = {v['name']: v for v in results['variants']}
    return variants.get(name) or variants[results['primary_variant']]


def _summary_total(rows: Sequence[Mapping[str, str]], column: str) -> Optional[float]:
    """The sum of `column` over the epochs' rows; None without rows or where a row lacks it."""
    values = [row.get(column) for row in rows]
    if not values or any(v in (None, '') for v in values):
        return None
    return sum(float(v) for v in values)


def _summary_totals(run_dir: Path) -> Tuple[Optional[float], Optional[float]]:
    """The run's budget in vanilla epochs and its training seconds, summed over its ``summary.csv`` rows (one per
    finished epoch, whatever attempt finished it)."""
    summary = run_dir / 'summary.csv'
    rows = list(csv.DictReader(io.StringIO(read_utf8(summary)))) if summary.is_file() else []
    return _summary_total(rows, 'train_passes_per_image'), _summary_total(rows, 'train_seconds')


def read_cell(cell: Cell, variant: Optional[str] = None) -> Optional[CellResult]:
    """The numbers of an evaluated cell (None before its evaluation): of `variant` (``clean``: a mixture-BN model's
    clean branch) where the evaluation has it, else of its primary variant."""
    if not cell.results_file.is_file():
        return None
    results = json.loads(read_utf8(cell.results_file))
    chosen = _variant(results, variant)
    metrics = {'clean': chosen['clean'], 'robust': chosen['robust']}
    if chosen.get('clean_loss') is not None:
        metrics['loss:clean'] = chosen['clean_loss']
    for attack in chosen.get('attacks') or []:
        for key in ('label', 'protocol_label'):
            if attack.get(key):
                metrics[f'attack:{attack[key]}'] = attack['accuracy']
                if attack.get('loss') is not None:
                    metrics[f'loss:{attack[key]}'] = attack['loss']
    vanilla_epochs, train_seconds = _summary_totals(cell.run_dir)
    evaluated = EvalResults.from_dict(results)
    variant_result = next(v for v in evaluated.variants if v.name == chosen['name'])
    robust = robust_text(evaluated, variant_result)
    attacks = {f'attack:{label}': suite_text([attack]) for attack in variant_result.attacks
               for label in dict.fromkeys((attack.label, attack.protocol_label)) if label}
    return CellResult(cell=cell, metrics=metrics, samples=int(chosen['samples']), robust=robust,
                      vanilla_epochs=vanilla_epochs, train_seconds=train_seconds,
                      attacks=attacks)


def _stat(results: Sequence[CellResult], metric: str) -> Stat:
    return Stat(tuple(r.metrics[metric] for r in results if metric in r.metrics), 3 if is_loss(metric) else 1)


@dataclass(frozen=True)
class GroupResult:
    """The cells of one grid point (its seeds) pooled."""

    labels: Mapping[str, Any]
    results: Tuple[CellResult, ...]
    cells: int

    def stat(self, metric: str) -> Stat:
        return _stat(self.results, metric)

    def mean_of(self, values: Sequence[Optional[float]]) -> Optional[float]:
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known else None

    def median_of(self, values: Sequence[Optional[float]]) -> Optional[float]:
        """The median of the known `values` (None without any): for times, which one run disturbed by other work
        on the machine would pull a mean far off."""
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None


def group_results(cells: Sequence[Cell], results: Mapping[str, CellResult]) -> List[GroupResult]:
    """Grid points in grid order, each with the results of its evaluated seeds."""
    groups: Dict[Tuple, List[Cell]] = {}
    for cell in cells:
        groups.setdefault(tuple(cell.labels.items()), []).append(cell)
    return [GroupResult(labels=dict(key), results=tuple(results[c.id] for c in members if c.id in results),
                        cells=len(members)) for key, members in groups.items()]


@dataclass(frozen=True)
class RatioRow:
    """A row of a `RatioTable`: the baseline grid point as measured, or another one as ratios to it."""

    labels: Mapping[str, Any]
    baseline: bool
    stats: Tuple[Stat, ...]


def ratio_rows(table: RatioTable, groups: Sequence[GroupResult]) -> List[RatioRow]:
    """The rows of `table`: its baseline, then every grid point it shows, each metric divided seed by seed by the
    baseline's (the seeds pair up as the cells do); none while the baseline is not evaluated."""
    base = next((g for g in groups if all(g.labels.get(a) == v for a, v in table.baseline.items())), None)
    if base is None or not base.results:
        return []
    by_seed = {r.cell.seed: r.metrics for r in base.results}
    rows = [RatioRow(base.labels, True, tuple(base.stat(m) for m in table.metrics))]
    for group in groups:
        if group is base or not table.shows(group.labels):
            continue
        stats = tuple(Stat(tuple(r.metrics[m] / by_seed[r.cell.seed][m] for r in group.results
                                 if m in r.metrics and by_seed.get(r.cell.seed, {}).get(m)), 3)
                      for m in table.metrics)
        rows.append(RatioRow(group.labels, False, stats))
    return rows


def metric_title(metric: str) -> str:
    """A column title: ``bim-linf top-1 (%)``, ``bim-linf loss (cross-entropy)``."""
    if is_loss(metric):
        return f'{metric[len("loss:"):]} loss (cross-entropy)'
    return {'clean': 'clean top-1 (%)', 'robust': 'robust top-1 (%)'}.get(metric, f'{metric[7:]} top-1 (%)')


def _table_metrics(spec: StudySpec) -> List[str]:
    extra = ([f.metric for f in spec.findings] + list(spec.plot.y) + [m for t in spec.ratios for m in t.metrics]
             + list(spec.metrics))
    return list(dict.fromkeys(['clean', 'robust', *extra]))


def summarize_findings(findings: Sequence[FindingResult]) -> str:
    """The findings' verdicts counted with their denominators (`findings.summarize_verdicts`)."""
    return summarize_verdicts([(f.verdict, f.size_verdict) for f in findings])


def _blank(value: Optional[float]) -> Any:
    return '' if value is None else value


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header),
            *('| ' + ' | '.join(row) + ' |' for row in rows)]


def write_tables(spec: StudySpec, scale: str, cells: Sequence[Cell], study_dir: Path,
                 header_lines: Sequence[str] = ()) -> Tuple[List[GroupResult], List[FindingResult]]:
    """Write ``results.md`` (findings, every grid point, then the ratio tables), ``results.csv`` (every evaluated
    cell and seed), ``grid.csv`` (the grid points, seeds pooled), ``findings.csv`` and, when the study has ratio
    tables, ``ratios.csv`` into `study_dir`; returns the groups and findings."""
    results = {c.id: r for c in cells if (r := read_cell(c, spec.metric_variant)) is not None}
    groups = group_results(cells, results)
    findings = [check_finding(f, cells, results, spec.min_clean) for f in spec.findings]
    metrics = _table_metrics(spec)
    axes = spec.axes

    spread = spec.spread
    finding_rows = [[f.finding.claim, f.finding.source or '—', f.finding.paper, metric_title(f.finding.metric),
                     f.finding.measure, f.format_paper() if f.finding.expected else '—', f.format_ours(), f.verdict,
                     f.size_verdict] for f in findings]
    group_rows = []
    for group in groups:
        budget = group.mean_of([r.vanilla_epochs for r in group.results])
        seconds = group.median_of([r.train_seconds for r in group.results])
        group_rows.append([*(str(group.labels.get(a, '')) for a in axes), f'{len(group.results)}/{group.cells}',
                           *(group.stat(m).format(spread) for m in metrics),
                           '—' if budget is None else f'{budget:g}', '—' if seconds is None else f'{seconds:.0f}'])
    lines = [f'# {spec.title}: {scale} scale', '', spec.paper, '', *header_lines, '', '## Findings', '',
             summarize_findings(findings), '',
             *_markdown_table(['finding', 'source', 'paper (as printed)', 'metric', 'measure', 'paper',
                               'ours (± standard error)', 'direction held', 'size held'], finding_rows),
             '', f'## Cells (mean ± {SPREADS[spread]})', '',
             *_markdown_table([*axes, 'seeds', *(metric_title(m) for m in metrics), 'budget (vanilla epochs)',
                               'train time (s, median over seeds)'], group_rows), '']
    ratio_tables = [(table, ratio_rows(table, groups)) for table in spec.ratios]
    for table, rows in ratio_tables:
        lines += [f'## {table.title}', '', *_markdown_table(
            [*axes, 'shown as', *(metric_title(m) for m in table.metrics)],
            [[*(str(row.labels.get(a, '')) for a in axes), 'measured' if row.baseline else 'ratio to the first row',
              *(stat.format(spread) for stat in row.stats)] for row in rows]), '']
    (study_dir / 'results.md').write_text('\n'.join(lines))
    if ratio_tables:
        with (study_dir / 'ratios.csv').open('w', newline='') as f:
            writer = csv.writer(f)
            writer.writerow(['table', *axes, 'shown_as', 'metric', 'mean', 'std', 'se', 'n'])
            for table, rows in ratio_tables:
                for row in rows:
                    for metric, stat in zip(table.metrics, row.stats):
                        writer.writerow([table.title, *(row.labels.get(a, '') for a in axes),
                                         'measured' if row.baseline else 'ratio', metric,
                                         *((stat.mean, stat.std, stat.se) if stat.values else ('', '', '')),
                                         len(stat.values)])

    with (study_dir / 'results.csv').open('w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow([*axes, 'seed', 'cell', 'samples', *metrics, 'vanilla_epochs', 'train_seconds'])
        for cell in cells:
            result = results.get(cell.id)
            if result is not None:
                writer.writerow([*(cell.labels.get(a, '') for a in axes), cell.seed, cell.id, result.samples,
                                 *(result.metrics.get(m, '') for m in metrics), _blank(result.vanilla_epochs),
                                 _blank(result.train_seconds)])
    with (study_dir / 'grid.csv').open('w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow([*axes, 'seeds_done', 'seeds',
                         *(f'{m}_{s}' for m in metrics for s in ('mean', 'std', 'se')), 'vanilla_epochs',
                         'train_seconds_median'])
        for group in groups:
            stats = [group.stat(m) for m in metrics]
            writer.writerow([*(group.labels.get(a, '') for a in axes), len(group.results), group.cells,
                             *(v for s in stats for v in ((s.mean, s.std, s.se) if s.values else ('', '', ''))),
                             group.mean_of([r.vanilla_epochs for r in group.results]),
                             group.median_of([r.train_seconds for r in group.results])])
    with (study_dir / 'findings.csv').open('w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['finding', 'source', 'metric', 'measure', 'paper', 'paper_se', 'ours', 'ours_se', 'n',
                         'held_direction', 'held_size', 'tolerance', 'paper_printed'])
        for r in findings:
            expected, ours = r.finding.expected, r.ours
            writer.writerow([r.finding.claim, r.finding.source, r.finding.metric, r.finding.measure,
                             *((expected.value, expected.se) if expected else ('', '')),
                             *((ours.value, ours.se, ours.n) if ours else ('', '', 0)), r.verdict, r.size_verdict,
                             _blank(r.finding.tolerance), r.finding.paper])
    return groups, findings
