"""Run a seed paper's comparison grid as `StudyOptions` say (what ``timm-advnorm-study`` was told): expand its cells,
plan them (``--dry-run``) or run them with the chosen launcher, then write the results table, the paper-style plot
and the provenance of the numbers, and, with `StudyOptions.record`, copy them where the documentation reads them.
"""
import contextlib
import logging
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

import torch

from ..durations import duration_text
from ..write_guard import check_folder_writable, check_names
from .cells import Cell, expand_cells
from .options import LAUNCHERS, CellCommands, StudyOptions
from .parallel import LOG_FOLDER, cell_threads, makespan, run_cells_side_by_side
from .plan import plan_cell_budget
from .plot import plot_study
from .projection import CellTime, measured_factor, time_cell
from .provenance import InvocationRecord, code_commit
from .record import check_record_keeps, record_study
from .runner import InProcessCommands, SubmititLauncher, SubprocessCommands, cell_state, run_cells
from .spec import StudySpec, load_study
from .table import SPREADS, summarize_findings, write_tables

__all__ = ['LAUNCHERS', 'run_study']

_logger = logging.getLogger('study')


def _with_seeds(spec: StudySpec, scale: str, seeds: Optional[Sequence[int]]) -> StudySpec:
    if not seeds:
        return spec
    return replace(spec, scales={**spec.scales, scale: replace(spec.scale(scale), seeds=tuple(seeds))})


def _time_left(cell: Cell, projected: CellTime) -> float:
    """The projected seconds `cell` still needs: none once evaluated, its evaluation once trained."""
    state = cell_state(cell)
    if state == 'evaluated':
        return 0.0
    return (projected.after_training if state == 'trained' else projected).total


def _time_summary(cells: Sequence[Cell], projected: Dict[str, CellTime], jobs: int) -> str:
    """The line that projects the study's remaining time, `jobs` cells at once, scaled by what the cells that ran
    here took."""
    left = [cell for cell in cells if cell_state(cell) != 'evaluated']
    seconds = [_time_left(cell, projected[cell.id]) for cell in left]
    where = f'this machine ({", ".join(sorted({projected[cell.id].device for cell in cells}))})'
    cells_left = f'the {len(left)} cells' if len(left) != 1 else 'the cell'
    line = f'Projected time of {cells_left} not yet evaluated: {duration_text(sum(seconds))} of compute on {where}'
    wall = makespan(seconds, jobs)  # the sum of `seconds` for one job at a time
    side_by_side = f', {duration_text(wall)} with {jobs} at a time' if jobs > 1 else ''
    factor = measured_factor(cells, projected)
    if factor is None:
        return line + side_by_side + ('; loading and decoding images, checkpoints and starting each command are not '
                                      'counted (no cell has run here yet to measure them).\n')
    ratio, count = factor
    ran = (f'the {count} cells run here took {ratio:.2f}x their' if count > 1
           else f'the cell run here took {ratio:.2f}x its')
    at_once = f' ({jobs} at a time)' if jobs > 1 else ''
    return line + side_by_side + (f'; {ran} projection (data, checkpoints, start-up), so '
                                  f'{duration_text(wall * ratio)} in all'
                                  f'{at_once}.\n')


def _dry_run(cells: Sequence[Cell], commands: CellCommands, world_size: int, timed: bool, jobs: int) -> None:
    """Log every cell: its state, commands and counted budget (once per grid point: the seeds cost the same) and,
    when `timed`, its projected time on this machine and the study's, `jobs` cells at once (each timed on its share
    of the CPUs, `parallel.cell_threads`)."""
    budgets: Dict[tuple, object] = {}
    times: Dict[tuple, CellTime] = {}
    total_passes = total_flops = 0.0
    for cell in cells:
        key = tuple(cell.labels.items())
        if key not in budgets:
            train_options = commands.train_options(cell.train_values)
            budgets[key] = plan_cell_budget(train_options, world_size=world_size)
            if timed:
                with _threads(cell_threads(jobs) if jobs > 1 else None):
                    times[key] = time_cell(train_options, commands.validate_options(cell.validate_values), world_size)
        budget = budgets[key]
        total_passes += budget.passes_total
        total_flops += budget.flops_total
        lines = [f'{cell.id} [{cell_state(cell)}]', *(f'  {c}' for c in cell.commands()),
                 f'  budget: {budget.passes_per_image:g} passes/image x {budget.images_per_epoch:,} images x '
                 f'{budget.epochs} epochs = {budget.passes_total:,.0f} passes, {budget.flops_total:.3g} FLOPs']
        if timed:
            cell_time = times[key]
            lines.append(f'  time: {duration_text(cell_time.training)} training, '
                         f'{duration_text(cell_time.validation)} validation, {duration_text(cell_time.evaluation)} '
                         f'evaluation (projected here, compute only)')
        sys.stdout.write('\n'.join(lines) + '\n')
        sys.stdout.flush()  # a plan times each grid point: show each cell as it is done, not at the end
    sys.stdout.write(f'{len(cells)} cells: {total_passes:,.0f} forward+backward passes, {total_flops:.3g} FLOPs in all '
                     f'(training; evaluation not counted)\n')
    if timed:
        sys.stdout.write(_time_summary(cells, {cell.id: times[tuple(cell.labels.items())] for cell in cells}, jobs))


@contextlib.contextmanager
def _threads(count: Optional[int]) -> Iterator[None]:
    """Within the block, torch computes on `count` threads (None: as it does)."""
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _runner(options: StudyOptions, commands: CellCommands) -> Union[InProcessCommands, SubprocessCommands]:
    """What runs the cells' commands: `InProcessCommands` or `SubprocessCommands`."""
    if options.launcher == 'local':
        return InProcessCommands(commands)
    prefix = options.launch_prefix
    return SubprocessCommands(tuple(shlex.split(prefix)) if prefix else (sys.executable,))


def _command(options: StudyOptions, prog: str) -> str:
    """The command line that reruns the study (its folder, data, seeds), as a user would type it."""
    return shlex.join([prog, options.study, '--scale', options.scale,
                       *(['--data-dir', options.data_dir] if options.data_dir else []),
                       *(['--seeds', *map(str, options.seeds)] if options.seeds else [])])


def _report(spec: StudySpec, options: StudyOptions, cells: List[Cell], study_dir: Path, seconds: float,
            prog: str, invocation: InvocationRecord) -> None:
    planned = spec.scale(options.scale).seeds
    evaluated = [c for c in cells if cell_state(c) == 'evaluated']
    seeds = ', '.join(map(str, sorted({c.seed for c in evaluated}))) or 'none'
    progress = f'{len(evaluated)} of {len(cells)} cells evaluated'
    planned_text = '' if len(evaluated) == len(cells) else f'; seeds planned: {", ".join(map(str, planned))}'
    header = [f'Command: `{_command(options, prog)}`', '',
              f'{progress}; seeds {seeds}{planned_text}; this invocation ran {seconds / 60:.1f} min, the study '
              f'{invocation.summary()} (`provenance.json`). Per cell: `cells/<id>/` (timm-advnorm-train run folder, '
              f'`results.json` of timm-advnorm-validate).']
    groups, findings = write_tables(spec, options.scale, cells, study_dir, header)
    subtitle = f'{options.scale} scale, mean ± {SPREADS[spec.spread]} {seeds}'
    if planned_text:
        subtitle += f' ({progress}{planned_text})'
    plot_study(spec.plot, groups, study_dir / 'study.png', subtitle, spec.spread)
    for result in findings:
        _logger.info(f'{result.finding.claim}: direction {result.verdict}, size {result.size_verdict} (ours '
                     f'{result.format_ours()}, paper {result.format_paper()})')
    _logger.info(summarize_findings(findings))
    ratios = ', ratios.csv' if spec.ratios else ''
    _logger.info(f'Wrote {study_dir / "results.md"}, results.csv, grid.csv, findings.csv{ratios}, provenance.json '
                 f'and study.png')


def _run_cells(options: StudyOptions, commands: CellCommands, cells: List[Cell], study_dir: Path,
               on_evaluated: Callable[[Cell], None]) -> None:
    """Run the cells not yet evaluated as `options` say (in this process, side by side, or on Slurm), telling
    `on_evaluated` of each as it is evaluated."""
    runner = _runner(options, commands)
    if options.jobs > 1:
        prefix = shlex.split(options.launch_prefix) if options.launch_prefix else (sys.executable,)
        run_cells_side_by_side(cells, options.jobs, study_dir / LOG_FOLDER, prefix, options.max_cells, on_evaluated)
    elif options.launcher == 'submitit':
        SubmititLauncher(study_dir / 'submitit', options.submitit_cluster, options.submitit_params).run(
            cells, runner, options.max_cells, on_evaluated)
    else:
        run_cells(cells, runner, options.max_cells, on_evaluated)


def run_study(options: StudyOptions, commands: CellCommands, prog: str) -> None:
    """Run (or with `StudyOptions.dry_run` plan) the study `options` name, its cells as `commands`' runs; `prog` is
    the command the report shows."""
    spec = _with_seeds(load_study(options.study), options.scale, options.seeds)
    study_dir = Path(options.output) / f'{spec.name}-{options.scale}'
    cells = expand_cells(spec, options.scale, study_dir, commands, data_dir=options.data_dir, device=options.device)
    if options.dry_run:
        _dry_run(cells, commands, options.world_size, options.plan, options.jobs)
        return
    check_folder_writable(study_dir)  # its name and every cell's, and the file system: before the first cell runs
    record = Path(options.record) / spec.name / options.scale if options.record else None
    if record is not None:  # a record this run could not keep whole is refused before its first cell, not after
        check_record_keeps(record, [cell.id for cell in cells])
    for cell in cells:
        check_names(cell.run_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    invocation = InvocationRecord(study_dir, code_commit(), _command(options, prog), jobs=options.jobs,
                                  cell_threads=cell_threads(options.jobs) if options.jobs > 1 else None)
    try:
        _run_cells(options, commands, cells, study_dir, lambda cell: invocation.cell_evaluated(cell.id))
        _report(spec, options, cells, study_dir, time.perf_counter() - started, prog, invocation)
    except BaseException as e:
        with contextlib.suppress(OSError):  # a full disk must not hide why the invocation stopped
            invocation.finish('interrupted' if isinstance(e, KeyboardInterrupt) else 'failed')
        raise
    invocation.finish()
    if record is not None:
        record_study(study_dir, record)
        _logger.info(f'Recorded the tables, plot and provenance in {record}')
