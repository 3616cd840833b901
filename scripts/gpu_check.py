"""The GPU kit: one prepared call that tells, within a short GPU window, what works, what breaks and how fast it is.

Stages, in order of value per second (``scripts/gpu_kit/stages.py``): ``install`` (the wheels of ``--wheels``,
offline, after their manifest is checked), ``environment``, ``device-tier`` (the CUDA test tier; its CPU twin on the
CPU), the five benchmarks of ``benchmarks/`` under bfloat16 autocast in channels_last memory, ``imagenet-folder`` (a
synthetic folder laid out like ImageNet), ``train`` (``mbn``, ``--amp --channels-last --grad-checkpointing``),
``validate`` (``--protocol xie2020 --reduced`` on its checkpoint) and, last, ``train-compiled`` (the same run with
``--torchcompile``). A stage starts only when its estimated time fits what is left of ``--budget``; one that does not
is recorded as skipped for the budget.

OUTDIR receives only what a window brings back, each file rewritten after every stage: ``gpu_report.md`` (the
environment, every stage's result, seconds and detail, the stages still to run, every benchmark's tables),
``environment.json`` (the device, driver, Python, torch/CUDA/cuDNN, timm and every installed package's version),
``junit.xml`` (the tier's tests) and ``logs.tar.gz`` (every stage's log and the runs' records; no checkpoint, no
image). Runs and data go to ``--scratch``.

Example:
    bash scripts/gpu_check.sh --prepare-wheels .whl              # here, with network to PyPI
    bash scripts/gpu_check.sh --wheels .whl "$OUT"               # on the GPU machine, offline, in about 360 s
    bash scripts/gpu_check.sh --wheels .whl --stages train-compiled "$OUT"   # a second call: the compiled run
    bash scripts/gpu_check.sh --device cpu --tiny --budget 45 OUTDIR         # anywhere, on tiny models
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from gpu_kit.report import OUTPUT_FILES
from gpu_kit.runner import Run, stage_environment
from gpu_kit.stages import GPU_SIZES, STAGE_NAMES, TINY_SIZES, build_stages, select_stages
from gpu_kit.wheels import install_command, prepare_wheels, verify_wheels

PROG = 'gpu_check.sh'
#: Seconds a default run may take: it and a rerun fit a fifteen-minute window, start-up included.
DEFAULT_BUDGET = 360.0
SELECTABLE = STAGE_NAMES[2:]


class _OneLineErrorParser(argparse.ArgumentParser):
    """Bad input as the package's commands report it: ``gpu_check.sh: error: <message>`` on stderr, exit status 2.

    Not `timm_advnorm.commands.parser.ArgumentParser`: this script runs before the wheels it installs, on the standard
    library.
    """

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message} (see --help)\n')


def _stage_list(text: str) -> List[str]:
    names = [name.strip() for name in text.split(',') if name.strip()]
    unknown = [name for name in names if name not in SELECTABLE]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f'unknown stage {", ".join(unknown) or repr(text)}; choose from '
                                         f'{", ".join(SELECTABLE)}')
    return names


def has_cxx_compiler() -> bool:
    """Whether inductor can compile here: it builds C++ for the CPU."""
    return any(shutil.which(name) for name in (os.environ.get('CXX', ''), 'g++', 'clang++', 'c++') if name)


def get_args_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(prog=PROG, description=__doc__.split('\n')[0])
    parser.add_argument('outdir', nargs='?', type=Path,
                        help='folder the report, environment, JUnit file and log archive are written to (at most 4 '
                             'files: what a GPU window brings back)')
    parser.add_argument('--prepare-wheels', type=Path, metavar='DIR',
                        help='download the wheels a bare machine lacks (timm as constraints.txt pins it, '
                             'torchattacks), build the project\'s own, write their manifest into DIR, and stop '
                             '(needs network to PyPI)')
    parser.add_argument('--wheels', type=Path, metavar='DIR',
                        help='install the wheels of DIR first, offline, after checking them against its manifest')
    parser.add_argument('--device', default='cuda', help='device of every stage (default: cuda)')
    parser.add_argument('--tiny', action='store_true', help='tiny models and data: about a minute and a half on a CPU')
    parser.add_argument('--budget', type=float, default=DEFAULT_BUDGET, metavar='SECONDS',
                        help=f'seconds the whole run may take (default: {DEFAULT_BUDGET:.0f}, so that it and a rerun '
                             'fit a fifteen-minute window); a stage whose estimate does not fit is skipped')
    parser.add_argument('--scratch', type=Path, metavar='DIR',
                        help='new or empty folder for the runs, data and logs (default: a temporary folder, removed '
                             'at the end)')
    parser.add_argument('--stages', type=_stage_list, metavar='NAME[,NAME...]',
                        help='run only these stages (and those they need), e.g. train-compiled; '
                             f'from {", ".join(SELECTABLE)}')
    parser.add_argument('--compile-backend', choices=('inductor', 'eager'),
                        help='torch.compile backend of train-compiled (default: inductor; with --tiny, inductor '
                             'where a C++ compiler exists, else eager)')
    return parser


def _cuda_missing(device: str) -> Optional[str]:
    """Why `device` cannot run here, when it is a CUDA device and this interpreter's torch sees none."""
    if not device.startswith('cuda'):
        return None
    probe = subprocess.run([sys.executable, '-c', 'import torch; print(torch.cuda.is_available(), torch.__version__, '
                                                  'torch.version.cuda)'], capture_output=True, text=True)
    if probe.returncode != 0:
        return f'--device {device}: torch does not import ({(probe.stderr.strip().splitlines() or ["?"])[-1]})'
    available, version, cuda = probe.stdout.split()
    if available != 'True':
        return (f'--device {device}: torch.cuda.is_available() is false here (torch {version}, CUDA build {cuda}); '
                'run it on a GPU machine, or use --device cpu --tiny')
    return None


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse what cannot run, before anything is written (`parser.error`: one line, exit status 2)."""
    if args.prepare_wheels is not None:
        if args.outdir is not None or args.wheels is not None:
            parser.error('--prepare-wheels DIR takes no OUTDIR and no --wheels')
        return
    if args.outdir is None:
        parser.error('OUTDIR is required (or --prepare-wheels DIR)')
    if args.outdir.exists() and not args.outdir.is_dir():
        parser.error(f'OUTDIR {args.outdir} is a file; give a new folder')
    taken = [name for name in OUTPUT_FILES if (args.outdir / name).exists()]
    if taken:
        parser.error(f'{args.outdir / taken[0]} already exists; give a new OUTDIR')
    if not args.budget > 0:
        parser.error(f'--budget must be a positive number of seconds, got {args.budget:g}')
    if args.scratch is not None:
        if args.scratch.exists() and (not args.scratch.is_dir() or any(args.scratch.iterdir())):
            parser.error(f'--scratch {args.scratch}: not an empty folder; give a new one')
        if args.scratch.resolve().is_relative_to(args.outdir.resolve()):
            parser.error(f'--scratch {args.scratch} is inside OUTDIR, which holds only what a window brings back')
    if args.wheels is not None:
        try:
            verify_wheels(args.wheels)
        except ValueError as e:
            parser.error(str(e))
    missing = _cuda_missing(args.device)
    if missing is not None:
        parser.error(missing)


def run(args: argparse.Namespace, started: float) -> int:
    """Run the stages the arguments select; the exit status (`Run.execute`)."""
    sizes = TINY_SIZES if args.tiny else GPU_SIZES
    backend = args.compile_backend or ('inductor' if not args.tiny or has_cxx_compiler() else 'eager')
    own_scratch = args.scratch is None
    scratch = Path(tempfile.mkdtemp(prefix='gpu_check_')) if own_scratch else args.scratch
    args.outdir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    site = scratch / 'site' if args.wheels is not None else None
    install = install_command(verify_wheels(args.wheels), site) if args.wheels is not None else None
    stages = select_stages(build_stages(args.device, sizes, scratch, backend, install, site), args.stages)
    mode = f'{args.device}, {"tiny models" if args.tiny else "GPU sizes"}, train-compiled with {backend}'
    kit = Run(stages, sizes, backend, args.budget, args.outdir, scratch, mode, started)
    try:
        return kit.execute(stage_environment(site), lambda line: print(line, flush=True))
    finally:
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    started = time.monotonic()
    parser = get_args_parser()
    args = parser.parse_args(argv)
    check_args(args, parser)
    if args.prepare_wheels is not None:
        try:
            print('\n'.join(prepare_wheels(args.prepare_wheels)))
        except ValueError as e:
            parser.error(str(e))
        return 0
    return run(args, started)


if __name__ == '__main__':
    sys.exit(main())
