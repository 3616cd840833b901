"""Run a seed paper's comparison grid from the parsed ``timm-advnorm-study`` arguments
(`timm_advnorm.commands.study`): expand its cells, plan them (``--dry-run``) or run them with the chosen launcher,
then write the results table and the paper-style plot.
"""
import argparse
import logging
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .cells import Cell, expand_cells
from .plan import plan_cell_budget
from .plot import plot_study
from .runner import InProcessCommands, SubmititLauncher, SubprocessCommands, cell_state, run_cells
from .spec import StudySpec, load_study
from .table import write_tables

__all__ = ['LAUNCHERS', 'run_study']

#: ``--launcher``: where the cells' commands run.
LAUNCHERS = ('local', 'subprocess', 'submitit')
_logger = logging.getLogger('study')


def _with_seeds(spec: StudySpec, scale: str, seeds: Optional[Sequence[int]]) -> StudySpec:
    if not seeds:
        return spec
    return replace(spec, scales={**spec.scales, scale: replace(spec.scale(scale), seeds=tuple(seeds))})


def _dry_run(cells: Sequence[Cell], world_size: int) -> None:
    """Log every cell: its state, commands and counted budget (once per grid point: the seeds cost the same)."""
    budgets: Dict[tuple, object] = {}
    total_passes = total_flops = 0.0
    for cell in cells:
        key = tuple(cell.labels.items())
        if key not in budgets:
            budgets[key] = plan_cell_budget(cell.train_argv, world_size=world_size)
        budget = budgets[key]
        total_passes += budget.passes_total
        total_flops += budget.flops_total
        lines = [f'{cell.id} [{cell_state(cell)}]', *(f'  {c}' for c in cell.commands()),
                 f'  budget: {budget.passes_per_image:g} passes/image x {budget.images_per_epoch:,} images x '
                 f'{budget.epochs} epochs = {budget.passes_total:,.0f} passes, {budget.flops_total:.3g} FLOPs']
        sys.stdout.write('\n'.join(lines) + '\n')
    sys.stdout.write(f'{len(cells)} cells: {total_passes:,.0f} forward+backward passes, {total_flops:.3g} FLOPs in all '
                     f'(training; evaluation not counted)\n')


def _commands(args: argparse.Namespace):
    if args.launcher == 'local':
        return InProcessCommands()
    return SubprocessCommands(tuple(shlex.split(args.launch_prefix)) if args.launch_prefix else (sys.executable,))


def _report(spec: StudySpec, args: argparse.Namespace, cells: List[Cell], study_dir: Path, seconds: float,
            prog: str) -> None:
    scale = spec.scale(args.scale)
    done = sum(cell_state(c) == 'evaluated' for c in cells)
    command = shlex.join([prog, args.study, '--scale', args.scale,
                          *(['--data-dir', args.data_dir] if args.data_dir else []),
                          *(['--seeds', *map(str, args.seeds)] if args.seeds else [])])
    header = [f'Command: `{command}`', '',
              f'{done} of {len(cells)} cells evaluated; seeds {", ".join(map(str, scale.seeds))}; this invocation '
              f'ran {seconds / 60:.1f} min. Per cell: `cells/<id>/` (timm-advnorm-train run folder, `results.json` '
              f'of timm-advnorm-validate).']
    groups, findings = write_tables(spec, args.scale, cells, study_dir, header)
    subtitle = f'{args.scale} scale, mean ± std over seeds {", ".join(map(str, scale.seeds))}'
    plot_study(spec.plot, groups, study_dir / 'study.png', subtitle)
    for result in findings:
        _logger.info(f'{result.finding.claim}: {result.verdict} (higher side {result.higher.format()}, lower side '
                     f'{result.lower.format()})')
    _logger.info(f'Wrote {study_dir / "results.md"}, results.csv, findings.csv and study.png')




def run_study(args: argparse.Namespace, prog: str) -> None:
    """Run (or with ``--dry-run`` plan) the study `args` name; `prog` is the command the report shows."""
    spec = _with_seeds(load_study(args.study), args.scale, args.seeds)
    study_dir = Path(args.output) / f'{spec.name}-{args.scale}'
    cells = expand_cells(spec, args.scale, study_dir, data_dir=args.data_dir, device=args.device)
    if args.dry_run:
        _dry_run(cells, args.world_size)
        return
    study_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    commands = _commands(args)
    if args.launcher == 'submitit':
        SubmititLauncher(study_dir / 'submitit', args.submitit_cluster, args.submitit_params).run(
            cells, commands, args.max_cells)
    else:
        run_cells(cells, commands, args.max_cells)
    _report(spec, args, cells, study_dir, time.perf_counter() - started, prog)
