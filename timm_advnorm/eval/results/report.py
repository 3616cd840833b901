"""Reporting: the output files of an evaluation (checked before it, written after it) and its console summary.

Every output is probed before the evaluation (`check_outputs`), so that a path that cannot be written, or a missing
matplotlib, ends the run before hours of work and not after; nothing is created by the probe. After it,
`write_outputs` publishes the CSV, the BN statistics, the plots and the JSON (`schema.EvalResults.to_dict`), never
replacing another run's files without ``--overwrite``; `log_results` prints the warnings that void numbers, then each
attack as it ran (`schema.AttackResult.describe`: norm, ε, step and rule, iterations or queries, targeted or not,
which iterate, reduced or not), then each variant's numbers under those labels: best-iterate accuracies, with the last
PGD iterate's (the papers' convention) beside them where the protocol scores it, and the sanity checks' verdict
(`schema.sanity_text`).
"""
import importlib
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ...weights import split_source
from ...write_guard import check_write_target
from ..options import LOGGER, EvalOptions, EvalOutputOptions
from ..protocols.ood import OOD_DATASETS
from ..run.distributed import DistributedInfo
from ..run.state import check_state_path, state_path
from ..schema import AttackResult, EvalResults, sanity_text
from .files import OutputFiles, check_writable, csv_rows, csv_text, json_text
from .plots import PLOT_NAMES, write_plots
from .summary import attack_title

__all__ = ['results_paths', 'check_outputs', 'write_outputs', 'log_results']

_logger = logging.getLogger(LOGGER)


def results_paths(results_file: str) -> Tuple[Optional[Path], Optional[Path], Optional[Path]]:
    """JSON, CSV and BN-statistics paths of ``--results-file`` (all None without one)."""
    if not results_file:
        return None, None, None
    path = Path(results_file)
    return path.with_suffix('.json'), path.with_suffix('.csv'), path.with_suffix('.bn_stats.json')


def _check_matplotlib() -> None:
    """``--plot-dir`` needs matplotlib, an optional dependency: say so before the evaluation, not after it."""
    try:
        importlib.import_module('matplotlib')
    except ImportError:
        raise ValueError('--plot-dir needs matplotlib: pip install "timm-advnorm[plots]" (or pip install matplotlib)'
                         ) from None


def _inputs(options: EvalOptions) -> Dict[str, Optional[str]]:
    """What the evaluation reads, by description, for `write_guard.check_write_target`: no output may equal or lie
    inside one of them (a results file replacing the checkpoint, plots becoming images of the data)."""
    model, data = options.model, options.data
    model_kind, model_location = split_source(model.name or '')
    reads = {'the checkpoint being evaluated': model.checkpoint,
             'the model folder being evaluated': model_location if model_kind == 'local-dir' else None,
             'the evaluation data': data.data_dir, 'the class map': data.class_map,
             'the config file': options.outputs.config_file}
    reads.update((f'the {dataset.title} data', data.ood_folders.get(dataset.name))
                 for dataset in OOD_DATASETS.values())
    return reads


def check_outputs(options: EvalOptions, dist_info: DistributedInfo) -> None:
    """Probe every output now, so that an output that cannot be written (or a missing matplotlib) ends the run
    before the evaluation and not after it, losing its results. Creates nothing: a run refused later, for its model
    or data, leaves no folder behind.

    Raises:
        FileExistsError: An output exists and ``--overwrite`` is not given.
        ValueError: An output cannot be written, it is or lies inside something the evaluation reads, or
            ``--plot-dir`` is given without matplotlib.
    """
    reads, files = _inputs(options), options.outputs
    if files.resume_state:
        check_write_target(files.resume_state, '--resume-state', reads, kind='file')
        check_state_path(state_path(files.resume_state, dist_info))
    if not dist_info.is_primary:
        return
    reads['the state file'] = files.resume_state
    outputs = [('--results-file', path) for path in results_paths(files.results_file) if path is not None]
    if files.plot_dir:
        _check_matplotlib()
        outputs += [('--plot-dir', Path(files.plot_dir) / name) for name in PLOT_NAMES]
    for option, path in outputs:
        check_write_target(path, option, reads, kind='file' if option == '--results-file' else 'folder')
        check_writable(path, files.overwrite)


def write_outputs(files: EvalOutputOptions, results: EvalResults, bn_stats: Dict[str, Any]) -> OutputFiles:
    """CSV, BN statistics and plots, then the JSON, which names the files as written (`results` records them:
    ``bn_stats.file`` and ``plots``); a failing plot still leaves the JSON and the CSV (the JSON is written on the way
    out), so it never costs the results.

    Every file is published by one `OutputFiles` (returned): none replaces another run's without ``--overwrite``,
    and from the first clash on, this run's files are kept under tagged names.
    """
    outputs = OutputFiles(files.overwrite)
    json_path, csv_path, bn_path = results_paths(files.results_file)
    if json_path is not None:
        csv_written = outputs.publish(csv_path, lambda tmp: tmp.write_text(csv_text(csv_rows(results))))
        if bn_stats:
            bn_written = outputs.publish(bn_path, lambda tmp: tmp.write_text(json_text(bn_stats)))
            results.bn_stats.file = bn_written.name
    try:
        if files.plot_dir:
            results.plots = write_plots(results, files.plot_dir, bn_stats, files.bn_layer, outputs, files.plot_note)
    finally:
        if json_path is not None:
            json_written = outputs.publish(json_path, lambda tmp: tmp.write_text(json_text(results.to_dict())))
            _logger.info('Wrote %s and %s', json_written, csv_written)
    return outputs


def _details(attack: AttackResult) -> str:
    """What follows an attack's accuracy in the console: its success rate, and its last iterate's numbers when
    scored (``(success 80.00; last iterate, the papers' convention: 14.00, success 76.00)``), and its mean
    cross-entropy loss where the protocol records it."""
    details = [] if attack.success_rate is None else [f'success {attack.success_rate:.2f}']
    if attack.accuracy_last_iterate is not None:
        last = f'last iterate, the papers\' convention: {attack.accuracy_last_iterate:.2f}'
        if attack.success_rate_last_iterate is not None:
            last += f', success {attack.success_rate_last_iterate:.2f}'
        details.append(last)
    if attack.loss is not None:
        details.append(f'loss {attack.loss:.4f} over all images')
    return f' ({"; ".join(details)})' if details else ''


def _log_attacks(results: EvalResults) -> None:
    """One line per attack that ran, by the label the numbers use: ``pgd-20: PGD-20 L∞, ε = 8/255, α = 2/255 (sign
    step), untargeted, best iterate``, and one for the sanity probes' ε-sweep (corruptions are named by their labels,
    ``fog-3``)."""
    described: Dict[str, str] = {}
    for variant in results.variants:
        for attack in variant.attacks:
            if attack.corruption is None:
                described.setdefault(attack.label, attack.describe(results.protocol.reduced))
    for label, text in described.items():
        _logger.info('%s: %s', label, text)
    probe = next((variant.sanity_probe for variant in results.variants if variant.sanity_probe), None)
    if probe is not None:
        _logger.info('sanity ε-sweep: %s, on %s samples', probe.describe(), probe.samples)


def log_results(results: EvalResults) -> None:
    """The warnings that void numbers first, then each attack as it ran, then each variant's numbers, then the
    verdict of the sanity checks (which ran, on how many samples, and which did not)."""
    for line in results.warnings:
        _logger.warning(line)
    _log_attacks(results)
    for variant in results.variants:
        first = next(iter(variant.scores))  # 'clean', or the out-of-distribution set the protocol runs on
        parts = [f'{first} {variant.clean:.2f}' + ('' if variant.clean_loss is None
                                                   else f' (loss {variant.clean_loss:.4f})')]
        parts += [f'{attack_title(a.label, a.steps, a.queries)} {a.accuracy:.2f}' + _details(a)
                  for a in variant.attacks]
        if variant.worst_case is not None:
            parts.append(f'worst case {variant.worst_case:.2f}')
        if variant.robust_last_iterate is not None:
            parts.append(f'robust {variant.robust:.2f} (best iterate), {variant.robust_last_iterate:.2f} '
                         f'(last iterate, the papers\' convention)')
        if variant.corruption_errors is not None:
            parts.append(f"mCE {variant.corruption_errors['mce']:.2f} (normalized by AlexNet's ImageNet-C errors)")
        parts += [f'{key} {variant.scores[key]:.2f}' for key in variant.scores
                  if key == 'imagenet-c' or key in variant.ood]
        _logger.info('%s: %s', variant.name, ', '.join(parts))
    sanity = sanity_text(results)
    if sanity is not None:
        _logger.info('Sanity checks: %s.', sanity)
