"""A study's figure in the style of its paper, drawn from the pooled grid points (mean, error bars: the seeds'
standard deviation, or the standard error of the mean for a study whose ``spread`` is ``se``).

* ``line``: a metric over a numeric axis, one line per value of ``series`` (Xie & Yuille Fig. 1: robustness over
  the ratio of clean images).
* ``tradeoff``: robust against clean accuracy, one marker colour per value of ``series``, each point labelled by its
  ``x`` value (NoFrost Fig. 2: the clean/robust trade-off over λ).
* ``bar``: metrics per value of ``x``, one bar group per value, grouped by ``series`` (Fast AdvProp Table 1,
  Galloway's tables).

A numeric x axis is ticked only at the grid's values (evaluated or not yet) and spans just them (a lone value
sits in the middle). The title says what each plotted accuracy ran (the robust accuracy's attacks, or the attack or
noise of an ``attack:<label>`` metric, with their budgets and steps) and on how many images each cell was evaluated: a
gap of one image is 100/N points.
"""
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .spec import PlotSpec
from .table import GroupResult, metric_title

__all__ = ['figure_study', 'plot_study']

#: Title characters per line (the title's font at the figure's width).
_TITLE_WIDTH = 95


def _series(groups: Sequence[GroupResult], axis: Any) -> Dict[Any, List[GroupResult]]:
    series: Dict[Any, List[GroupResult]] = {}
    for group in groups:
        if group.results:
            series.setdefault(group.labels.get(axis, '') if axis else '', []).append(group)
    return series


def _numeric(value: Any) -> bool:
    """Whether a grid value is a number (not a name, not a flag)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _grid_axis(ax, values: Sequence[float]) -> None:
    """Tick the x axis at the grid's `values` and fit its range to them (a lone value in the middle)."""
    ticks = sorted(set(values))
    span = ticks[-1] - ticks[0]
    pad = 0.05 * span if span else 0.1 * (abs(ticks[0]) or 1.0)
    ax.set_xticks(ticks, [f'{v:g}' for v in ticks])
    ax.set_xlim(ticks[0] - pad, ticks[-1] + pad)


def _line(ax, spec: PlotSpec, groups: Sequence[GroupResult], spread: str) -> None:
    placed = [g for g in groups if spec.x in g.labels]
    grid = [g.labels[spec.x] for g in placed]
    if grid and all(_numeric(v) for v in grid):
        _grid_axis(ax, grid)
    for name, members in _series(placed, spec.series).items():
        members = sorted(members, key=lambda g: g.labels[spec.x])
        for metric in spec.y:
            stats = [g.stat(metric) for g in members]
            label = ' '.join(str(p) for p in (name, metric if len(spec.y) > 1 else '') if p != '')
            ax.errorbar([g.labels[spec.x] for g in members], [s.mean for s in stats],
                        yerr=[getattr(s, spread) for s in stats], marker='o', capsize=3, label=label or None)
    ax.set_xlabel(spec.x.replace('_', ' '))
    ax.set_ylabel(metric_title(spec.y[0]) if len(spec.y) == 1 else 'top-1 (%)')


def _tradeoff(ax, spec: PlotSpec, groups: Sequence[GroupResult], spread: str) -> None:
    for name, members in _series(groups, spec.series).items():
        clean, robust = [g.stat('clean') for g in members], [g.stat(spec.y[0]) for g in members]
        ax.errorbar([s.mean for s in clean], [s.mean for s in robust], xerr=[getattr(s, spread) for s in clean],
                    yerr=[getattr(s, spread) for s in robust], marker='o', linestyle='', capsize=3,
                    label=str(name) or None)
        for group, c, r in zip(members, clean, robust):
            if spec.x in group.labels:
                ax.annotate(f'{spec.x.replace("_", " ")}={group.labels[spec.x]}', (c.mean, r.mean),
                            textcoords='offset points', xytext=(4, 4), fontsize=8)
    ax.set_xlabel(metric_title('clean'))
    ax.set_ylabel(metric_title(spec.y[0]))


def _bar(ax, spec: PlotSpec, groups: Sequence[GroupResult], spread: str) -> None:
    series = _series([g for g in groups if spec.x in g.labels], spec.series)
    categories = list(dict.fromkeys(g.labels[spec.x] for members in series.values() for g in members))
    bars = [(name, metric) for name in series for metric in spec.y]
    if not bars:  # nothing evaluated yet
        return
    width = 0.8 / len(bars)
    for index, (name, metric) in enumerate(bars):
        by_category = {g.labels[spec.x]: g.stat(metric) for g in series[name]}
        positions = [i + (index - (len(bars) - 1) / 2) * width for i, c in enumerate(categories) if c in by_category]
        stats = [by_category[c] for c in categories if c in by_category]
        label = ' '.join(str(p) for p in (name, metric_title(metric) if len(spec.y) > 1 else '') if p != '')
        ax.bar(positions, [s.mean for s in stats], width, yerr=[getattr(s, spread) for s in stats], capsize=3,
               label=label or None)
    ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    ax.set_xlabel(spec.x.replace('_', ' '))
    ax.set_ylabel(metric_title(spec.y[0]) if len(spec.y) == 1 else 'top-1 (%)')


_KINDS = {'line': _line, 'tradeoff': _tradeoff, 'bar': _bar}
# Bars fill the plot up to the highest accuracy: their legend goes below the axes rather than over a bar.
_LEGEND = {'bar': dict(loc='upper center', bbox_to_anchor=(0.5, -0.24), ncol=2)}


def _evaluation_text(groups: Sequence[GroupResult], metrics: Sequence[str]) -> Optional[str]:
    """What the plotted `metrics` ran, from the evaluated cells (None before any): ``robust: pgd-20 (...)`` for the
    robust accuracy, each attack's description for an ``attack:<label>`` metric; then ``359 images per cell``."""
    results = [r for g in groups for r in g.results]
    if not results:
        return None
    parts = []
    for metric in metrics:
        if metric == 'robust':
            texts = list(dict.fromkeys(r.robust for r in results))
            parts.append(f"robust: {texts[0] if len(texts) == 1 else 'attacks differ between cells'}")
        elif metric.startswith('attack:'):
            texts = list(dict.fromkeys(r.attacks.get(metric, '') for r in results))
            label = metric[len('attack:'):]
            parts.append(texts[0] if len(texts) == 1 and texts[0] else f'{label}: differs between cells')
    low, high = min(r.samples for r in results), max(r.samples for r in results)
    parts.append(f'{low} images per cell' if low == high else f'{low}-{high} images per cell')
    return '; '.join(parts)


def figure_study(spec: PlotSpec, groups: Sequence[GroupResult], subtitle: str = '', spread: str = 'std'):
    """The figure of `spec` from `groups` (those `spec.select` picks), on an Agg canvas; error bars are each grid
    point's `spread` (``std`` or ``se``).

    Raises:
        ValueError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ValueError('the study plot needs matplotlib: pip install "timm-advnorm[plots]"') from e
    groups = [g for g in groups if all(g.labels.get(axis) == value for axis, value in spec.select.items())]
    fig = Figure(figsize=(6.4, 4.4), layout='tight')
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    _KINDS[spec.kind](ax, spec, groups, spread)
    lines = [t for t in (spec.title, _evaluation_text(groups, spec.y), subtitle) if t]
    ax.set_title('\n'.join(textwrap.fill(t, _TITLE_WIDTH, break_on_hyphens=False) for t in lines), fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=8, **_LEGEND.get(spec.kind, {}))
    return fig


def plot_study(spec: PlotSpec, groups: Sequence[GroupResult], path: Path, subtitle: str = '',
               spread: str = 'std') -> Path:
    """Draw `spec` from `groups` into the PNG `path` (`figure_study`); returns it.

    Raises:
        ValueError: matplotlib is not installed.
    """
    figure_study(spec, groups, subtitle, spread).savefig(path, dpi=120, bbox_inches='tight')
    return path
