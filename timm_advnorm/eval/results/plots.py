"""PNG plots of evaluation results (`schema.EvalResults`), where a person would rather look than read.

* accuracy and targeted attack-success rate vs attack iterations, on two panels (Xie & Yuille Fig. 2/3: does
  robustness plateau or keep falling?);
* accuracy vs ε of the sanity probe, from ε = 0 (the clean accuracy of the same samples) on a symlog axis;
* the clean-vs-robust trade-off over γ of a mixture-BN model (NoFrost Fig. 2), drawn only when some variant
  interpolates between the branches (0 < γ < 1): two branches alone are two points, not a trade-off;
* clean vs adversarial BN statistics (Xie & Yuille Fig. 5) and their gap across depth by layer name, one quantity
  per panel.

Every figure says what was run: its title names the model, the attacks with their budgets (targeted or not,
iterations or queries, the step as recorded, ε as k/255, the names being those of the budgets that ran), the
variants, the dataset and number of samples, and whether the protocol (or the probe) was reduced; a note given with
``--plot-note`` (a smoke run's: the numbers mean nothing) comes first. Titles are wrapped to fit the figure as drawn,
and the γ labels of points that meet are moved apart. Every accuracy carries its 95 % Wilson interval
(`intervals.wilson_interval`), as a band or error bars, and the axes include those intervals: a difference of one
image, 0.5 points on 200 images, looks as small as it is.

The `figure_*` functions build a matplotlib `Figure` with the object API on an Agg canvas (no pyplot global state,
no display needed), or return None when there is nothing to plot, so that its axes can be read back; `write_plots`
writes them atomically (through `OutputFiles`, which never replaces another run's plot unless told to).
"""
import logging
import math
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ...attacks.registry import attack_arguments
from ..plan.stage_plan import SANITY_STEP_FACTOR
from ..protocols.describe import NORM_NAMES, pixels_text, step_phrase
from ..run.bn_stats import default_bn_layer
from ..schema import AttackResult, EvalResults, SanityProbe, VariantResult
from .files import OutputFiles
from .intervals import wilson_interval

__all__ = ['figure_accuracy_vs_iterations', 'figure_accuracy_vs_eps', 'figure_tradeoff', 'figure_bn_stats',
           'write_plots', 'eps_text', 'robust_text', 'step_text', 'suite_text', 'PLOT_NAMES']

_logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

PLOT_NAMES = ('accuracy_vs_iterations.png', 'accuracy_vs_eps.png', 'gamma_tradeoff.png', 'bn_stats.png')
#: A suite with more attacks than this is named by its size in titles, not by its attacks.
MAX_NAMED_ATTACKS = 6
#: Title characters per inch of figure width (matplotlib's 'medium' font) where title lines are first wrapped; a
#: title that is still wider than the figure as drawn is wrapped shorter until it fits.
TITLE_CHARS_PER_INCH = 14
#: Share of the figure's width a title may take: the rest is its margin.
TITLE_WIDTH = 0.96
#: Title lines are never wrapped shorter than this many characters.
MIN_TITLE_CHARS = 20
#: At most this many layer names label the depth axis of the BN plot (every k-th layer beyond).
MAX_LAYER_TICKS = 40
#: How the figures name their intervals.
INTERVAL_TEXT = '95 % Wilson intervals'


def _figure(nrows: int = 1, ncols: int = 1, width: float = 5.5, height: float = 4.0):
    """A figure on an Agg canvas and its axes, row by row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout='constrained')
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    return fig, axes


def _title(fig, *lines: str, note: str = '') -> None:
    """The figure's title: `note` (what the run was for, ``--plot-note``) first when given, then `lines`, each
    wrapped so that the title as drawn fits the figure's width (characters differ in width: a count per inch alone
    lets a line of wide ones run over both edges)."""
    lines = (note, *lines) if note else lines
    renderer, chars = fig.canvas.get_renderer(), int(fig.get_figwidth() * TITLE_CHARS_PER_INCH)
    while True:
        title = fig.suptitle('\n'.join(textwrap.fill(line, chars, break_on_hyphens=False) for line in lines),
                             fontsize='medium')
        if chars <= MIN_TITLE_CHARS or title.get_window_extent(renderer).width <= TITLE_WIDTH * fig.bbox.width:
            return
        chars -= 2


def _save(fig, path: PathLike, outputs: OutputFiles) -> Path:
    """Publish `fig` as a PNG at `path` (or where `outputs` keeps it); returns where it went."""
    written = outputs.publish(path, lambda tmp: fig.savefig(tmp, format='png', dpi=120))
    _logger.info('Wrote %s', written)
    return written


def eps_text(eps: float) -> str:
    """A budget on the 0-255 scale as users read it: ``16/255`` (``0`` for none)."""
    return '0' if eps == 0 else f'{eps:g}/255'


def _log_axis(ax, values: Sequence[float]) -> None:
    """Log-scaled x axis ticked at the measured values, labelled as plain numbers."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale('log')
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f'{v:g}' for v in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _eps_axis(ax, values: Sequence[float]) -> None:
    """Symlog x axis (linear up to the smallest positive ε, so ε = 0 shows) ticked at the ε values, as k/255."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ticks = sorted(set(values))
    positive = [v for v in ticks if v > 0]
    ax.set_xscale('symlog', base=2, linthresh=min(positive) if positive else 1.0)
    ax.set_xticks(ticks, [eps_text(v) for v in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _count(values: Sequence[int], unit: str) -> str:
    """``13 iterations``, ``2-13 iterations``."""
    low, high = min(values), max(values)
    return f'{low} {unit}' if low == high else f'{low}-{high} {unit}'


def _arguments(attack: Optional[str]) -> Optional[Dict[str, Any]]:
    """The arguments attack `attack` takes (`attack_arguments`); None for a name this install does not know."""
    try:
        return attack_arguments(attack or '')
    except ValueError:
        return None


def step_text(attack: AttackResult) -> Optional[str]:
    """The step of an attack as its results record it: ``α = 2/255 (sign step)``, ``adaptive step (from 2ε, halved
    at checkpoints)`` (`describe.step_phrase`, as every output names it). In results written before steps were
    recorded, what the attack's arguments say: ``step 2/255``, ``step max(1/255, ε/N)`` (Xie & Yuille's rule), ``step
    not recorded`` when they hold none, ``step 4/255 (rule not recorded)`` when the attack has a step rule they do not
    name, and None for an attack without a step of its own (one-step, query-based, noise, APGD's adaptive step)."""
    if attack.step_rule is not None:
        return step_phrase(attack.step, attack.step_rule)
    arguments = _arguments(attack.attack)
    if attack.steps is None or (arguments is not None and 'step' not in arguments):
        return None
    step = attack.kwargs.get('step')
    if not isinstance(step, (int, float)) or isinstance(step, bool):
        return 'step not recorded'
    fixed = f'{step:.3g}/255'
    rule = attack.kwargs.get('step_rule')
    if rule == 'max':
        return f'step max({fixed}, ε/N)'
    if rule is None and (arguments is None or 'step_rule' in arguments):
        return f'step {fixed} (rule not recorded)'
    return f'step {fixed}'


def _targeted_text(attacks: Sequence[AttackResult]) -> Optional[str]:
    """``targeted``, ``untargeted`` or ``targeted and untargeted`` (None when no attack records it: noise)."""
    flags = {a.targeted for a in attacks if a.targeted is not None}
    if not flags:
        return None
    return 'targeted and untargeted' if len(flags) > 1 else ('targeted' if flags == {True} else 'untargeted')


def _step_sizes_text(attacks: Sequence[AttackResult]) -> Optional[str]:
    """The steps of `attacks` (`step_text`): one text when they share it (attacks that share a rule but not a size,
    as a sweep under ``max(1/255, ε/N)``, give their range: ``α = 1.231-8/255 (sign step, max(1/255, ε/N))``), else
    each with the attacks that take it (``α = 0.3825/255 (sign step, ε/N) (bim-linf), α = 21.2/255 (L2 step, ε/N)
    (bim-l2)``); None when none has a step."""
    by_step: Dict[str, List[str]] = defaultdict(list)
    sized: Dict[str, List[AttackResult]] = defaultdict(list)
    for attack in attacks:
        if attack.step is not None and attack.step_rule is not None:
            sized[attack.step_rule].append(attack)
        elif step_text(attack):
            by_step[step_text(attack)].append(attack.label)
    for rule, group in sized.items():
        low, high = min(a.step for a in group), max(a.step for a in group)
        size = pixels_text(low) if low == high else f'{low:.4g}-{pixels_text(high)}'
        by_step[f'α = {size} ({rule})'] += [a.label for a in group]
    if len(by_step) <= 1:
        return next(iter(by_step), None)
    return ', '.join(f"{text} ({', '.join(labels)})" for text, labels in by_step.items())


def _budget_text(attacks: Sequence[AttackResult]) -> str:
    """The budgets of `attacks`: targeted or not, iterations, step, queries, ε per norm, which iterate, noise σ
    (``targeted, 13 iterations, α = 1.231/255 (sign step, max(1/255, ε/N)), L∞ ε=16/255, best iterate``)."""
    parts = []
    targeted = _targeted_text(attacks)
    if targeted:
        parts.append(targeted)
    steps = [a.steps for a in attacks if a.steps is not None]
    queries = [a.queries for a in attacks if a.queries is not None]
    if steps:
        parts.append(_count(steps, 'iterations'))
    step_sizes = _step_sizes_text(attacks)
    if step_sizes:
        parts.append(step_sizes)
    if queries:
        parts.append(_count(queries, 'queries'))
    for norm in dict.fromkeys(a.norm for a in attacks if a.norm):
        eps = sorted({a.eps for a in attacks if a.norm == norm})
        parts.append(f"{NORM_NAMES.get(norm, norm)}\N{NO-BREAK SPACE}ε={', '.join(eps_text(e) for e in eps)}")
    iterates = [a.iterate for a in attacks if a.iterate]
    if iterates:
        parts.append(' and '.join(dict.fromkeys(iterates)) + ' iterate')
    for scale in dict.fromkeys(a.sigma_scale for a in attacks if a.sigma is not None):
        sigmas = sorted({a.sigma for a in attacks if a.sigma_scale == scale})
        parts.append(f"noise σ={', '.join(f'{s:g}' for s in sigmas)} on {scale}")
    severities = sorted({a.severity for a in attacks if a.severity is not None})
    if severities:
        low, high = severities[0], severities[-1]
        parts.append(f'severity {low}' if low == high else f'severities {low}-{high}')
    return ', '.join(parts)


def suite_text(attacks: Sequence[AttackResult]) -> str:
    """Attacks by the names of what ran, with their budgets: one attack as every output names it
    (`AttackResult.describe`: ``pgd-20 (PGD-20 L∞, ε = 8/255, α = 2/255 (sign step), untargeted, best iterate)``),
    several by their shared budgets (``pgd-t-2, ..., pgd-t-13 (targeted, 2-13 iterations, α = 1.231-8/255 (sign step,
    max(1/255, ε/N)), L∞ ε=16/255, best iterate)``)."""
    if len(attacks) == 1:
        return f'{attacks[0].label} ({attacks[0].describe()})'
    noun = 'corruptions' if all(a.attack == 'corruption' for a in attacks) else 'attacks'
    names = ', '.join(a.label for a in attacks) if len(attacks) <= MAX_NAMED_ATTACKS else f'{len(attacks)} {noun}'
    budget = _budget_text(attacks)
    return f'{names} ({budget})' if budget else names


def _protocol_text(results: EvalResults) -> str:
    """``xie2020 protocol (reduced)``."""
    return f"{results.protocol.name} protocol{' (reduced)' if results.protocol.reduced else ''}"


def _data_text(results: EvalResults, items: Sequence[Union[VariantResult, SanityProbe]]) -> str:
    """``digits (validation), 64 samples``: the data and the sample count of every variant or probe (they share the
    subset), or ``sample count not recorded``."""
    counts = sorted({item.samples for item in items if item.samples})
    samples = f"{'/'.join(str(n) for n in counts)} samples" if counts else 'sample count not recorded'
    if not results.dataset:
        return samples
    split = f' ({results.split})' if results.split else ''
    return f'{results.dataset}{split}, {samples}'


def _interval(accuracy: float, samples: Optional[int]) -> Tuple[float, float]:
    """The 95 % interval of `accuracy` on `samples` images (the value itself when the count is not recorded)."""
    return wilson_interval(accuracy, samples) if samples else (accuracy, accuracy)


def _band(ax, x: Sequence[float], accuracies: Sequence[float], samples: Sequence[Optional[int]], color) -> None:
    """Shade the 95 % interval of each accuracy along a line; autoscaling then keeps the whole band in view."""
    low, high = zip(*(_interval(a, n) for a, n in zip(accuracies, samples)))
    ax.fill_between(x, low, high, color=color, alpha=0.15, linewidth=0)


def _resolution_text(drawn_as: str, samples: Sequence[Optional[int]]) -> str:
    """``shaded: 95 % Wilson intervals; one image = 0.5 points`` (`drawn_as` ``shaded``), from the smallest sample
    count; ``no intervals: sample count not recorded`` without one."""
    counts = [n for n in samples if n]
    if not counts:
        return 'no intervals: sample count not recorded'
    return f'{drawn_as}: {INTERVAL_TEXT}; one image = {100.0 / min(counts):.2g} points'


def _variants_text(variants: Sequence[VariantResult]) -> str:
    """``variant adv`` or ``variants clean, mix@0.5, adv``."""
    return f"variant{'s' if len(variants) > 1 else ''} {', '.join(v.name for v in variants)}"


def _distinct(attacks: Sequence[AttackResult]) -> List[AttackResult]:
    """`attacks` with one entry per name (the same attack of several variants)."""
    return list({a.label: a for a in attacks}.values())


def _iteration_curves(results: EvalResults) -> Dict[Tuple, List[Tuple[str, List[AttackResult]]]]:
    """White-box attacks that differ only in iterations, by (attack, norm, ε, targeted): per variant, >= 2 budgets."""
    curves: Dict[Tuple, List[Tuple[str, List[AttackResult]]]] = defaultdict(list)
    for variant in results.variants:
        groups: Dict[Tuple, List[AttackResult]] = defaultdict(list)
        for attack in variant.attacks:
            if attack.threat == 'white-box' and attack.steps is not None:
                groups[(attack.attack, attack.norm, attack.eps, attack.targeted)].append(attack)
        for key, attacks in groups.items():
            if len({a.steps for a in attacks}) >= 2:
                curves[key].append((variant.name, sorted(attacks, key=lambda a: a.steps)))
    return curves


def figure_accuracy_vs_iterations(results: EvalResults, note: str = ''):
    """Accuracy (left) and, for targeted attacks, attack-success rate (right) against iterations, for attacks that
    differ only in them, each with its 95 % band, `note` atop the title (`_title`); None when there are none."""
    curves = _iteration_curves(results)
    if not curves:
        return None
    success = any(all(a.success_rate is not None for a in attacks) for lines in curves.values() for _, attacks in lines)
    fig, axes = _figure(ncols=2 if success else 1)
    steps, plotted = [], []
    for key, lines in curves.items():
        name, _, eps, targeted = key
        for variant, attacks in lines:
            label = variant
            if len(curves) > 1:
                label += f": {'targeted ' if targeted else ''}{name} ε={eps_text(eps)}"
            x = [a.steps for a in attacks]
            steps += x
            plotted += attacks
            line, = axes[0].plot(x, [a.accuracy for a in attacks], marker='o', label=label)
            _band(axes[0], x, [a.accuracy for a in attacks], [a.samples for a in attacks], line.get_color())
            if success and all(a.success_rate is not None for a in attacks):
                rates = [a.success_rate for a in attacks]
                axes[1].plot(x, rates, marker='x', color=line.get_color(), label=label)
                _band(axes[1], x, rates, [a.attacked or a.samples for a in attacks], line.get_color())
    variants = [v for v in results.variants if any(v.name == n for lines in curves.values() for n, _ in lines)]
    for ax, what in zip(axes, ('accuracy (%)', 'targeted attack-success rate (%)')):
        _log_axis(ax, steps)
        ax.set_xlabel('attack iterations')
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        ax.legend(fontsize='small')
    kinds = ', '.join(dict.fromkeys(f"{'targeted ' if targeted else ''}{name}" for name, _, _, targeted in curves))
    _title(fig, f"{results.model}: accuracy{' and attack-success rate' if success else ''} vs iterations of {kinds}",
           suite_text(_distinct(plotted)),
           f'{_protocol_text(results)}, {_data_text(results, variants)}, {_variants_text(variants)}',
           _resolution_text('shaded', [a.samples for a in plotted]), note=note)
    return fig


def figure_accuracy_vs_eps(results: EvalResults, note: str = ''):
    """Accuracy against the L∞ budget of the sanity probe's PGD, from ε = 0, each with its 95 % band, `note` atop the
    title (`_title`); None when the probes did not run."""
    variants = [v for v in results.variants if len(v.eps_sweep) >= 2 and v.sanity_probe]
    if not variants:
        return None
    fig, (ax,) = _figure(width=7.0, height=4.5)
    for variant in variants:
        sweep = variant.eps_sweep
        x, accuracies = [p.eps for p in sweep], [p.accuracy for p in sweep]
        line, = ax.plot(x, accuracies, marker='o', label=variant.name)
        _band(ax, x, accuracies, [variant.sanity_probe.samples] * len(sweep), line.get_color())
    _eps_axis(ax, [p.eps for v in variants for p in v.eps_sweep])
    ax.set_xlabel('L∞ ε (symlog scale)')
    ax.set_ylabel('accuracy (%)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small')
    probes = [v.sanity_probe for v in variants]
    probe = probes[0]
    _title(fig, f"{results.model}: accuracy vs ε, sanity probe{' (reduced)' if probe.reduced else ''}",
           f'untargeted PGD-{probe.steps} from the clean image, step {SANITY_STEP_FACTOR:g}ε/N, '
           f"{_data_text(results, probes)} (the subset's first)",
           f'{_protocol_text(results)}, {_variants_text(variants)}',
           _resolution_text('shaded', [p.samples for p in probes]), note=note)
    return fig


def robust_text(results: EvalResults, variant: VariantResult) -> str:
    """What the robust accuracy of `variant` is: the protocol's headline, named by the attacks that ran with their
    budgets (``pgd-20 (untargeted, 20 iterations, step 2/255, L∞ ε=16/255)``); ``no attack`` when none ran."""
    attacks, headline = variant.attacks, results.protocol.headline or 'last'
    if not attacks or headline == 'clean':
        return 'no attack'
    if headline == 'worst-case':
        return f'per-sample worst case over {suite_text(attacks)}'
    if headline == 'mean':
        return f'mean accuracy over {suite_text(attacks)}'
    chosen = attacks[-1] if headline == 'last' else next((a for a in attacks if a.protocol_label == headline), None)
    return suite_text([chosen]) if chosen else suite_text(attacks)


def _interpolates(variant: VariantResult) -> bool:
    """Whether `variant` mixes the two branches: feature or logit interpolation at 0 < γ < 1."""
    return variant.kind in ('mix', 'logits') and 0.0 < variant.gamma < 1.0


def _errorbar(ax, variants: Sequence[VariantResult], **style) -> None:
    """Draw robust vs clean accuracy of `variants` with their 95 % intervals on both axes."""
    clean = [_interval(v.clean, v.samples) for v in variants]
    robust = [_interval(v.robust, v.samples) for v in variants]
    x, y = [v.clean for v in variants], [v.robust for v in variants]
    xerr = [[c - low for c, (low, _) in zip(x, clean)], [high - c for c, (_, high) in zip(x, clean)]]
    yerr = [[r - low for r, (low, _) in zip(y, robust)], [high - r for r, (_, high) in zip(y, robust)]]
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, capsize=2, elinewidth=0.8, **style)


def figure_tradeoff(results: EvalResults, note: str = ''):
    """Robust vs clean accuracy of a mixture-BN model as γ goes from the clean (0) to the adversarial branch (1), with
    95 % intervals on both axes and each point's γ beside it, `note` atop the title (`_title`); None without a variant
    between the branches (0 < γ < 1) or without robust accuracy (a protocol whose headline is the clean accuracy)."""
    variants = [v for v in results.variants if v.gamma is not None and v.robust is not None and v.clean is not None]
    if results.protocol.headline == 'clean' or not any(_interpolates(v) for v in variants):
        return None
    ends = [v for v in variants if v.kind in ('clean', 'adv')]
    fig, (ax,) = _figure(width=7.0, height=5.0)
    curves = (('mix', 'feature interpolation (mix route)'), ('logits', 'logit interpolation'))
    labels = []
    for index, (kind, label) in enumerate(curves):
        interior = [v for v in variants if v.kind == kind and _interpolates(v)]
        if not interior:
            continue
        points = sorted(ends + interior, key=lambda v: v.gamma)
        line, = ax.plot([v.clean for v in points], [v.robust for v in points], label=label)
        _errorbar(ax, interior, fmt='o', color=line.get_color())
        for v in interior:  # one curve's labels above its points, the other's below
            labels.append(ax.annotate(f'γ={v.gamma:g}', (v.clean, v.robust), textcoords='offset points',
                                      xytext=(5, 5 if index == 0 else -12), fontsize='small', color=line.get_color()))
    if ends:
        _errorbar(ax, ends, fmt='s', color='black', label='branches (γ = 0, 1)')
        for v in ends:  # the adversarial branch's label above, the clean one's below: apart where they meet
            labels.append(ax.annotate(f'γ={v.gamma:g} ({v.kind} BN)', (v.clean, v.robust), textcoords='offset points',
                                      xytext=(5, 5 if v.kind == 'adv' else -12), fontsize='small'))
    ax.margins(0.1)  # room for the annotations
    ax.set_xlabel('clean accuracy (%)')
    ax.set_ylabel('robust accuracy (%)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize='small')
    _title(fig, f'{results.model}: clean vs robust accuracy over γ (0: clean branch, 1: adversarial branch)',
           f'robust: {robust_text(results, variants[0])}',
           f'{_protocol_text(results)}, {_data_text(results, variants)}, {_variants_text(variants)}',
           _resolution_text('bars', [v.samples for v in variants]), note=note)
    _separate(fig, labels)
    return fig


def _separate(fig, labels: Sequence[Any]) -> None:
    """Move each of `labels` (annotations offset in points) down, a line at a time, until it overlaps none before it:
    the labels of points that meet (a smoke run's variants often score alike) would otherwise print over each other.
    The figure is laid out first, so that the labels are measured where they will be drawn."""
    fig.draw_without_rendering()
    renderer, placed = fig.canvas.get_renderer(), []
    for label in labels:
        box = label.get_window_extent(renderer)
        while any(box.overlaps(other) for other in placed):
            x, y = label.xyann
            label.xyann = (x, y - box.height * 72.0 / fig.dpi - 1.0)
            box = label.get_window_extent(renderer)
        placed.append(box)


def _layer_axis(ax, layers: Sequence[str]) -> None:
    """Label the depth axis with the layers' module names (every k-th beyond `MAX_LAYER_TICKS` layers)."""
    every = max(1, math.ceil(len(layers) / MAX_LAYER_TICKS))
    positions = list(range(0, len(layers), every))
    ax.set_xticks(positions, [layers[i] for i in positions], rotation=90, fontsize='x-small')
    ax.set_xlabel('mixture-BN layer (depth order' + (f', 1 in {every} named)' if every > 1 else ')'))


def figure_bn_stats(
        stats: Mapping[str, Mapping[str, List[float]]],
        summary: List[Mapping[str, Any]],
        model: str,
        layer: Optional[str] = None,
        channels: int = 20,
        seed: int = 0,
        run: str = '',
        note: str = '',
):
    """Xie & Yuille Fig. 5 for one layer (running mean and variance of random channels, clean vs adversarial BN),
    and across depth, by layer name, the mean log variance ratio and the share of channels whose adversarial variance
    is larger, one quantity per panel; None for a model without mixture BN. `run` (the evaluation of the checkpoint
    whose statistics these are: they come from its training, not from the evaluated samples) and `note` go in the
    title (`_title`)."""
    if not stats:
        return None
    layer = layer or default_bn_layer(stats)
    if layer not in stats:
        raise ValueError(f'No mixture-BN layer named {layer!r}; e.g. {", ".join(list(stats)[:3])}.')
    s = stats[layer]
    num = len(s['clean_mean'])
    picked = np.sort(np.random.default_rng(seed).choice(num, size=min(channels, num), replace=False))
    fig, axes = _figure(nrows=2, ncols=2, width=5.5, height=3.8)
    x = np.arange(len(picked))
    for ax, key, what in ((axes[0], 'mean', 'running mean'), (axes[1], 'var', 'running variance')):
        ax.plot(x, np.asarray(s[f'clean_{key}'])[picked], 'o', label='clean BN')
        ax.plot(x, np.asarray(s[f'adv_{key}'])[picked], 's', label='adversarial BN')
        ax.set_xticks(x, [str(c) for c in picked], rotation=90, fontsize='x-small')
        ax.set_xlabel(f'channel of {layer} ({len(picked)} of {num}, random)')
        ax.set_ylabel(what)
        ax.legend(fontsize='small')
    layers = [str(row.get('layer', index)) for index, row in enumerate(summary)]
    depth = np.arange(len(summary))
    axes[2].plot(depth, [row['var_log_ratio'] for row in summary], marker='.')
    axes[2].axhline(0.0, color='grey', linewidth=0.5)
    axes[2].set_ylabel('mean ln(var adv / var clean)')
    axes[3].plot(depth, [100.0 * row['frac_adv_var_larger'] for row in summary], marker='.')
    axes[3].axhline(50.0, color='grey', linewidth=0.5)
    axes[3].set_ylim(-5, 105)
    axes[3].set_ylabel('channels with var adv > var clean (%)')
    for ax in axes[2:]:
        _layer_axis(ax, layers)
        ax.grid(alpha=0.3)
    _title(fig, f'{model}: running statistics of the clean and adversarial BN branches, as trained',
           f'top: {layer}; bottom: every mixture-BN layer ({len(summary)})',
           *([f'checkpoint evaluated on: {run}'] if run else []), note=note)
    return fig


def write_plots(
        results: EvalResults,
        plot_dir: PathLike,
        bn_stats: Optional[Mapping[str, Any]] = None,
        bn_layer: Optional[str] = None,
        outputs: Optional[OutputFiles] = None,
        note: str = '',
) -> List[str]:
    """Every applicable plot of `results` into `plot_dir`, each titled with `note` first; returns the names of the
    written files.

    Args:
        results: The results of ``validate_adv.py``.
        plot_dir: Destination folder (created when missing).
        bn_stats: Per-layer BN statistics (`collect_bn_stats`) for the BN plot.
        bn_layer: Layer of the BN plot (default: `default_bn_layer`).
        outputs: Publishes the files; default: one that replaces existing plots. A run that must not replace
            another's passes its own, and gets back the names it kept its plots under.
        note: What the run was for, atop every title (``--plot-note``: ``smoke run: the numbers mean nothing``).
    """
    plot_dir = Path(plot_dir)
    outputs = outputs or OutputFiles(overwrite=True)
    iterations, eps, tradeoff, bn = PLOT_NAMES
    figures = [(iterations, figure_accuracy_vs_iterations(results, note)), (eps, figure_accuracy_vs_eps(results, note)),
               (tradeoff, figure_tradeoff(results, note))]
    if bn_stats:
        run = f'{_protocol_text(results)}, {_data_text(results, results.variants)}'
        figures.append((bn, figure_bn_stats(bn_stats, results.bn_stats.layers, results.model, bn_layer, run=run,
                                            note=note)))
    written = []
    for name, fig in figures:
        if fig is not None:
            written.append(_save(fig, plot_dir / name, outputs).name)
    return written
