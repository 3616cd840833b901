"""A study's figure in the style of its paper, drawn from the pooled grid points (mean, error bars: the seeds'
standard deviation).

* ``line``: a metric over a numeric axis, one line per value of ``series`` (Xie & Yuille Fig. 1: robustness over
  the ratio of clean images).
* ``tradeoff``: robust against clean accuracy, one marker colour per value of ``series``, each point labelled by its
  ``x`` value (NoFrost Fig. 2: the clean/robust trade-off over λ).
* ``bar``: metrics per value of ``x``, one bar group per value, grouped by ``series`` (Fast AdvProp Table 1,
  Galloway's tables).
"""
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .spec import PlotSpec
from .table import GroupResult, metric_title

__all__ = ['plot_study']


def _series(groups: Sequence[GroupResult], axis: Any) -> Dict[Any, List[GroupResult]]:
    series: Dict[Any, List[GroupResult]] = {}
    for group in groups:
        if group.results:
            series.setdefault(group.labels.get(axis, '') if axis else '', []).append(group)
    return series


def _line(ax, spec: PlotSpec, groups: Sequence[GroupResult]) -> None:
    for name, members in _series([g for g in groups if spec.x in g.labels], spec.series).items():
        members = sorted(members, key=lambda g: g.labels[spec.x])
        for metric in spec.y:
            stats = [g.stat(metric) for g in members]
            label = ' '.join(str(p) for p in (name, metric if len(spec.y) > 1 else '') if p != '')
            ax.errorbar([g.labels[spec.x] for g in members], [s.mean for s in stats], yerr=[s.std for s in stats],
                        marker='o', capsize=3, label=label or None)
    ax.set_xlabel(spec.x.replace('_', ' '))
    ax.set_ylabel(metric_title(spec.y[0]) if len(spec.y) == 1 else 'top-1 (%)')


def _tradeoff(ax, spec: PlotSpec, groups: Sequence[GroupResult]) -> None:
    for name, members in _series(groups, spec.series).items():
        clean, robust = [g.stat('clean') for g in members], [g.stat(spec.y[0]) for g in members]
        ax.errorbar([s.mean for s in clean], [s.mean for s in robust], xerr=[s.std for s in clean],
                    yerr=[s.std for s in robust], marker='o', linestyle='', capsize=3, label=str(name) or None)
        for group, c, r in zip(members, clean, robust):
            if spec.x in group.labels:
                ax.annotate(f'{spec.x.replace("_", " ")}={group.labels[spec.x]}', (c.mean, r.mean),
                            textcoords='offset points', xytext=(4, 4), fontsize=8)
    ax.set_xlabel(metric_title('clean'))
    ax.set_ylabel(metric_title(spec.y[0]))


def _bar(ax, spec: PlotSpec, groups: Sequence[GroupResult]) -> None:
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
        ax.bar(positions, [s.mean for s in stats], width, yerr=[s.std for s in stats], capsize=3, label=label or None)
    ax.set_xticks(range(len(categories)), [str(c) for c in categories])
    ax.set_xlabel(spec.x.replace('_', ' '))
    ax.set_ylabel(metric_title(spec.y[0]) if len(spec.y) == 1 else 'top-1 (%)')


_KINDS = {'line': _line, 'tradeoff': _tradeoff, 'bar': _bar}
# Bars fill the plot up to the highest accuracy: their legend goes below the axes rather than over a bar.
_LEGEND = {'bar': dict(loc='upper center', bbox_to_anchor=(0.5, -0.14), ncol=2)}


def plot_study(spec: PlotSpec, groups: Sequence[GroupResult], path: Path, subtitle: str = '') -> Path:
    """Draw `spec` from `groups` into the PNG `path`; returns it.

    Raises:
        ValueError: matplotlib is not installed.
    """
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ValueError('the study plot needs matplotlib: pip install "timm-advnorm[plots]"') from e
    groups = [g for g in groups if all(g.labels.get(axis) == value for axis, value in spec.select.items())]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    try:
        _KINDS[spec.kind](ax, spec, groups)
        ax.set_title('\n'.join(t for t in (spec.title, subtitle) if t), fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=8, **_LEGEND.get(spec.kind, {}))
        fig.tight_layout()
        fig.savefig(path, dpi=120, bbox_inches='tight')
    finally:
        plt.close(fig)
    return path
