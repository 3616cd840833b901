"""PNG plots of a results dict, where a person would rather look than read (DESIGN §5).

* accuracy vs attack iterations (Xie & Yuille Fig. 2/3: does robustness plateau or keep falling?);
* accuracy vs ε (the sanity sweep, plus any protocol attacks that differ only in ε);
* the clean-vs-robust trade-off over γ of a mixture-BN model (NoFrost Fig. 2);
* clean vs adversarial BN statistics (Xie & Yuille Fig. 5) and their gap across depth.

Figures are built with matplotlib's object API on an Agg canvas (no pyplot global state, no display needed) and
written atomically. Each function returns whether it had something to plot.
"""
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

from .bn_stats import default_bn_layer
from .results import atomic_write

__all__ = ['plot_accuracy_vs_iterations', 'plot_accuracy_vs_eps', 'plot_tradeoff', 'plot_bn_stats', 'write_plots',
           'PLOT_NAMES']

_logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

PLOT_NAMES = ('accuracy_vs_iterations.png', 'accuracy_vs_eps.png', 'gamma_tradeoff.png', 'bn_stats.png')


def _figure(ncols: int = 1, width: float = 5.5, height: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout='constrained')
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _save(fig, path: PathLike) -> None:
    atomic_write(path, lambda tmp: fig.savefig(tmp, format='png', dpi=120))
    _logger.info('Wrote %s', path)


def _log_axis(ax, values, base: float = 10) -> None:
    """Log-scaled x axis ticked at the measured values, labelled as plain numbers."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale('log', base=base)
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f'{v:g}' for v in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _title(results: Mapping[str, Any]) -> str:
    reduced = ' (reduced)' if results['protocol'].get('reduced') else ''
    return f"{results['model']} - {results['protocol']['name']}{reduced}"


def plot_accuracy_vs_iterations(results: Mapping[str, Any], path: PathLike) -> bool:
    """Accuracy (solid) and targeted success rate (dashed) against iterations, for attacks differing only in them."""
    fig, (ax,) = _figure()
    plotted, all_steps = False, []
    for variant in results['variants']:
        groups: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
        for attack in variant['attacks']:
            if attack['steps'] is not None and attack['threat'] == 'white-box':
                groups[(attack['attack'], attack['eps'], attack['targeted'])].append(attack)
        for (name, eps, targeted), attacks in groups.items():
            attacks = sorted(attacks, key=lambda a: a['steps'])
            if len({a['steps'] for a in attacks}) < 2:
                continue
            steps = [a['steps'] for a in attacks]
            all_steps += steps
            label = f"{variant['name']}: {name}{'-t' if targeted else ''} eps={eps:g}"
            line, = ax.plot(steps, [a['accuracy'] for a in attacks], marker='o', label=f'{label} accuracy')
            if all(a.get('success_rate') is not None for a in attacks):
                ax.plot(steps, [a['success_rate'] for a in attacks], marker='x', linestyle='--',
                        color=line.get_color(), label=f'{label} success')
            plotted = True
    if plotted:
        _log_axis(ax, all_steps)
        ax.set_xlabel('attack iterations')
        ax.set_ylabel('%')
        ax.set_title(_title(results))
        ax.grid(alpha=0.3)
        ax.legend(fontsize='small')
        _save(fig, path)
    return plotted


def plot_accuracy_vs_eps(results: Mapping[str, Any], path: PathLike) -> bool:
    """Accuracy against the L∞ budget: the sanity PGD sweep of every variant."""
    fig, (ax,) = _figure()
    plotted = False
    for variant in results['variants']:
        sweep = variant.get('eps_sweep') or []
        if len(sweep) >= 2:
            ax.plot([p['eps'] for p in sweep], [p['accuracy'] for p in sweep], marker='o',
                    label=f"{variant['name']} (sanity PGD)")
            plotted = True
    if plotted:
        _log_axis(ax, [p['eps'] for v in results['variants'] for p in v.get('eps_sweep') or []], base=2)
        ax.set_xlabel('Linf eps (0-255 scale)')
        ax.set_ylabel('accuracy (%)')
        ax.set_title(_title(results))
        ax.grid(alpha=0.3)
        ax.legend(fontsize='small')
        _save(fig, path)
    return plotted


def plot_tradeoff(results: Mapping[str, Any], path: PathLike) -> bool:
    """Robust vs clean accuracy of a mixture-BN model as γ goes from the clean (0) to the adversarial branch (1)."""
    variants = [v for v in results['variants'] if v['gamma'] is not None and v['robust'] is not None]
    if len(variants) < 2:
        return False
    ends = [v for v in variants if v['kind'] in ('clean', 'adv')]
    fig, (ax,) = _figure()
    for kind, label in (('mix', 'feature interpolation (mix route)'), ('logits', 'logit interpolation')):
        points = sorted(ends + [v for v in variants if v['kind'] == kind], key=lambda v: v['gamma'])
        if len(points) < 2 or not any(v['kind'] == kind for v in points):
            continue
        ax.plot([v['clean'] for v in points], [v['robust'] for v in points], marker='o', label=label)
        for v in points:
            ax.annotate(f"{v['gamma']:g}", (v['clean'], v['robust']), textcoords='offset points', xytext=(4, 4),
                        fontsize='small')
    if not any(v['kind'] in ('mix', 'logits') for v in variants):
        ax.plot([v['clean'] for v in ends], [v['robust'] for v in ends], marker='o', label='branches')
        for v in ends:
            ax.annotate(v['name'], (v['clean'], v['robust']), textcoords='offset points', xytext=(4, 4))
    ax.set_xlabel('clean accuracy (%)')
    ax.set_ylabel('robust accuracy (%)')
    ax.set_title(f'{_title(results)}: gamma trade-off')
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small')
    _save(fig, path)
    return True


def plot_bn_stats(
        stats: Mapping[str, Mapping[str, List[float]]],
        summary: List[Mapping[str, Any]],
        path: PathLike,
        layer: Optional[str] = None,
        channels: int = 20,
        seed: int = 0,
) -> bool:
    """Xie & Yuille Fig. 5 for one layer (running mean and variance of random channels, clean vs adversarial), and
    the per-layer gap across depth."""
    if not stats:
        return False
    layer = layer or default_bn_layer(stats)
    if layer not in stats:
        raise ValueError(f'No mixture-BN layer named {layer!r}; e.g. {", ".join(list(stats)[:3])}.')
    s = stats[layer]
    num = len(s['clean_mean'])
    picked = np.sort(np.random.default_rng(seed).choice(num, size=min(channels, num), replace=False))
    fig, axes = _figure(ncols=3, width=4.5)
    x = np.arange(len(picked))
    for ax, key, title in ((axes[0], 'mean', 'running mean'), (axes[1], 'var', 'running var')):
        ax.plot(x, np.asarray(s[f'clean_{key}'])[picked], 'o', label='clean BN')
        ax.plot(x, np.asarray(s[f'adv_{key}'])[picked], 's', label='adversarial BN')
        ax.set_xticks(x, [str(c) for c in picked], rotation=90, fontsize='x-small')
        ax.set_xlabel(f'channel of {layer}')
        ax.set_title(title)
        ax.legend(fontsize='small')
    depth = np.arange(len(summary))
    axes[2].plot(depth, [row['var_log_ratio'] for row in summary], label='mean log(var_adv / var_clean)')
    axes[2].plot(depth, [row['frac_adv_var_larger'] for row in summary], label='share of channels var_adv > var_clean')
    axes[2].axhline(0.0, color='grey', linewidth=0.5)
    axes[2].set_xlabel('mixture-BN layer (depth order)')
    axes[2].set_title('clean vs adversarial statistics across depth')
    axes[2].legend(fontsize='small')
    _save(fig, path)
    return True


def write_plots(
        results: Mapping[str, Any],
        plot_dir: PathLike,
        bn_stats: Optional[Mapping[str, Any]] = None,
        bn_layer: Optional[str] = None,
) -> List[str]:
    """Every applicable plot of `results` into `plot_dir`; returns the written file names."""
    plot_dir = Path(plot_dir)
    iterations, eps, tradeoff, bn = PLOT_NAMES
    written = []
    for name, plot in ((iterations, plot_accuracy_vs_iterations), (eps, plot_accuracy_vs_eps),
                       (tradeoff, plot_tradeoff)):
        if plot(results, plot_dir / name):
            written.append(name)
    if bn_stats and plot_bn_stats(bn_stats, results['bn_stats']['layers'], plot_dir / bn, bn_layer):
        written.append(bn)
    return written
