"""The ``timm-advnorm-demo`` command: the README's digits demo from the installed commands alone.

It adversarially trains a tiny mixture-BN ResNet on the built-in digits (``timm-advnorm-train -c digits_demo_mbn``),
trains the same model on clean images (``--method vanilla``), evaluates both under PGD-20 at ε = 16/255 with
``timm-advnorm-validate``, and prints its report (also written to ``report.md``: what ran, then the comparison
table; `demo_report`)::

    timm-advnorm-demo                                  # into output/demo-<time>/
    timm-advnorm-demo --output runs/demo --data-dir ~/data
    timm-advnorm-demo --smoke --output /tmp/demo      # every step with tiny budgets: its numbers mean nothing

Each step runs in this process as the console command does, and is printed first as the command line that runs it
alone. ``scripts/demo.sh`` in a checkout is this command after the environment's set-up.
"""
import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

from ..option_fields import options_from_values
from ..write_guard import check_folder_writable
from .demo_options import DemoOptions
from .demo_report import PLOT_DIR, RESULTS_FILE, report_text
from .options import declarations_of
from .parser import ArgumentParser, run_cli
from .train import run as run_train
from .validate import run as run_validate

__all__ = ['get_args_parser', 'demo_options', 'demo_steps', 'main', 'run', 'console_main']

PROG = 'timm-advnorm-demo'
_logger = logging.getLogger('demo')
#: The runs the demo trains, each as its run folder's name, the report's label and its options beyond the recipe.
RUNS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ('adversarial', 'adversarial (mbn)', ()),
    ('clean', 'clean (vanilla)', ('--method', 'vanilla')),
)
#: The evaluation of every run: PGD at ε = 16/255 (step 2), with the budget below.
EVALUATION = ('--dataset', 'digits', '--attacks', 'pgd', '--attack-eps', '16', '--attack-step', '2', '--workers', '0',
              '--no-progress')
#: Its budget: PGD-20 on all 359 validation digits.
EVALUATION_BUDGET = ('--attack-steps', '20', '--num-samples', '359')
#: γ of the mixture-BN evaluation (both branches and their mix); a plain model has γ = 0 only.
GAMMAS = {'adversarial': ('0', '0.5', '1'), 'clean': ('0',)}
#: ``--smoke``: one epoch with PGD-1 and a PGD-2 evaluation of 32 images, with small sanity checks.
SMOKE_TRAIN = ('--epochs', '1', '--attack-steps', '1', '--val-attack-steps', '1', '--num-samples', '32')
SMOKE_EVALUATION_BUDGET = ('--attack-steps', '2', '--num-samples', '32', '--sanity-samples', '16', '--sanity-steps',
                           '2', '--sanity-queries', '10')
#: What the plots of a smoke run say first.
SMOKE_PLOT_NOTE = 'SMOKE RUN (--smoke): tiny budgets, these numbers mean nothing about robustness'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """The command-line parser, generated from the declarations of the fields of `demo_options.DemoOptions`, in their
    order."""
    parser = ArgumentParser(prog=prog, description='Train a mixture-BN ResNet adversarially and the same model on '
                                                   'clean images on the built-in digits, evaluate both under PGD and '
                                                   'print the comparison (the README\'s demo table).')
    for declared in declarations_of([DemoOptions]).values():
        declared.add(parser, parser)
    return parser


def demo_options(args: argparse.Namespace) -> DemoOptions:
    """The typed options of the demo `args` (as `get_args_parser` parses them) describe, filled by option name
    (`option_fields.options_from_values`)."""
    return options_from_values(DemoOptions, vars(args))


def demo_steps(output: Path, data_dir: Optional[str] = None, smoke: bool = False) -> List[Tuple[str, List[str]]]:
    """The demo's commands in order, each as ``(command, arguments)``: two trainings, then their evaluations."""
    data = ['--data-dir', data_dir] if data_dir else []
    steps = []
    for name, _, options in RUNS:
        steps.append(('timm-advnorm-train', ['-c', 'digits_demo_mbn', *options, *data, '--output', str(output),
                                             '--experiment', name, *(SMOKE_TRAIN if smoke else ())]))
    for name, _, _ in RUNS:
        run_dir = output / name
        plots = ['--plot-dir', str(run_dir / PLOT_DIR)] if len(GAMMAS[name]) > 1 else []
        if plots and smoke:
            plots += ['--plot-note', SMOKE_PLOT_NOTE]
        steps.append(('timm-advnorm-validate', [
            *EVALUATION, *(SMOKE_EVALUATION_BUDGET if smoke else EVALUATION_BUDGET), *data,
            '--checkpoint', str(run_dir / 'last.pth.tar'),
            '--gammas', *GAMMAS[name], '--results-file', str(run_dir / RESULTS_FILE), *plots]))
    return steps


def _run_step(command: str, argv: List[str]) -> int:
    """Run one step in this process as its console command would (a failure says why on stderr); its exit status."""
    _logger.info(f'$ {shlex.join([command, *argv])}')
    return (run_train if command == 'timm-advnorm-train' else run_validate)(command, argv)


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Run the demo; returns the exit status. Bad input raises (see `run`)."""
    options = demo_options(get_args_parser(prog).parse_args(argv))
    if not logging.root.handlers:
        logging.basicConfig(level=logging.INFO, format='%(message)s')
    output = Path(options.output or f'output/demo-{time.strftime("%Y%m%d-%H%M%S")}')
    check_folder_writable(output)  # its name first: a name too long cannot even be looked up
    if output.exists():
        raise ValueError(f'{output} already exists; give a new folder with --output')
    for command, step_argv in demo_steps(output, options.data_dir, options.smoke):
        status = _run_step(command, step_argv)
        if status:
            return status
    report = report_text(output, [(name, label) for name, label, _ in RUNS], options.smoke)
    (output / 'report.md').write_text(report, encoding='utf-8')
    sys.stdout.write('\n' + report)
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-demo`` console command."""
    sys.exit(run(PROG))


if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.commands.demo'))
