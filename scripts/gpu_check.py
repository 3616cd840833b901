"""The GPU kit: one prepared run that tells, within ten minutes on a bare GPU machine, what works, what breaks and how
fast it is.

Stages, in order, each in a process of its own with its own timeout (a stage that fails or runs out of time is
recorded and the next one runs; the time of each is printed as it goes):

1. ``install``: the wheels of ``--wheels DIR`` (made beforehand by ``--prepare-wheels``) into a scratch folder put on
   ``PYTHONPATH`` right after this working tree, with ``pip install --no-index``: the machine needs no network;
2. ``environment``: the device's name and the torch, CUDA, timm and Python versions the stages run with;
3. ``cuda tier``: ``pytest -m cuda`` on ``tests/test_cuda_*.py``;
4. the five benchmarks of ``benchmarks/`` under bfloat16 autocast in channels_last memory, at GPU sizes (ResNet-50 and
   its mixture-BN version at 224 px) with their rounds bounded;
5. ``train``: ``train_adv.py`` (``mbn``, ``--amp --channels-last --grad-checkpointing``) for a few steps on a synthetic
   image folder laid out like ImageNet, then ``train --torchcompile``, the same run compiled;
6. ``validate``: ``validate_adv.py --protocol xie2020 --reduced`` on the first training run's checkpoint.

``--device cpu --tiny`` runs the same stages on tiny models on the CPU (the compiled run with torch.compile's
``eager`` backend, which keeps dynamo's tracing and guards without a C++ toolchain), in a few minutes: the test suite
runs it, so the kit cannot rot between GPU windows.

Everything is written to OUTDIR: ``gpu_report.md`` (the environment; each stage's result, seconds and, for a failure,
its output's last line; every benchmark's tables, whose figures are ratios against a baseline measured in the same
run), each stage's full output in ``logs/``, and the runs' folders.

Example:
    python scripts/gpu_check.py --prepare-wheels .whl          # here, with network to PyPI
    python scripts/gpu_check.py --wheels .whl OUTDIR           # on the GPU machine, no network
    python scripts/gpu_check.py --device cpu --tiny OUTDIR     # anywhere, in a few minutes
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
PROG = 'gpu_check.sh'
REPORT = 'gpu_report.md'
#: What a bare GPU machine may lack, as pip requirements: the timm the project needs and the benchmarks' reference PGD
#: (torchattacks, whose other needs, scipy and numpy, come with scikit-learn). Not pyautoattack: only the CPU
#: cross-check tests use it, which the kit does not run, and its wheel weighs 42 MB.
WHEEL_REQUIREMENTS = ('timm>=1.0.31', 'torchattacks==3.5.1')
#: The GPU machine's interpreter and platforms, for ``pip download``.
WHEEL_TARGET = ('--python-version', '3.12', '--implementation', 'cp', '--platform', 'manylinux_2_28_x86_64',
                '--platform', 'manylinux_2_17_x86_64', '--platform', 'manylinux2014_x86_64')
#: The CUDA tier's test files: collecting only them spares the machine the other tests' optional dependencies.
CUDA_TIER = tuple(str(path.relative_to(REPO)) for path in sorted(REPO.glob('tests/test_cuda_*.py')))
#: Printed by the ``environment`` stage, run with the interpreter and ``PYTHONPATH`` every stage runs with.
ENVIRONMENT_PROBE = '''
import json, platform, torch, timm, timm_advnorm
cuda = torch.cuda.is_available()
print(json.dumps({
    'device': torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
    'torch': torch.__version__, 'cuda': torch.version.cuda or 'none', 'cuda_available': cuda,
    'timm': timm.__version__, 'python': platform.python_version(), 'timm_advnorm': timm_advnorm.__file__}))
'''


@dataclass(frozen=True)
class Sizes:
    """What the stages run on: models, image sizes, batches and rounds.

    Attributes:
        benchmarks: Arguments of each benchmark script (``benchmarks/<name>.py``) besides the device options.
        train: Arguments of the training runs besides the data, device and output options.
        images_per_class: Images per class of the synthetic folder's ``train/`` and ``val/``.
        img_size: Side of its images and of the training input.
        compile_backend: ``--torchcompile``'s backend in the compiled training run.
        total_seconds: Seconds the whole run may take: a stage gets its own timeout or what is left of these,
            whichever is less.
        timeouts: Seconds each stage may take at most.
    """
    benchmarks: Dict[str, Tuple[str, ...]]
    train: Tuple[str, ...]
    images_per_class: Tuple[int, int]
    img_size: int
    compile_backend: str
    total_seconds: float
    timeouts: Dict[str, float] = field(default_factory=dict)


GPU_SIZES = Sizes(
    benchmarks={
        'bench_split_bn': ('--model', 'resnet50', '--img-size', '224', '--batch-size', '128', '--rounds', '10',
                           '--warmup', '3'),
        'bench_attack': ('--model', 'resnet50', '--img-size', '224', '--batch-size', '128', '--steps', '10',
                         '--rounds', '5', '--warmup', '2'),
        'bench_eval': ('--model', 'resnet50', '--img-size', '224', '--batch-size', '128', '--train-steps', '50',
                       '--eps', '16', '--steps', '10', '--sweep', '10', '20', '--rounds', '2', '--warmup', '1'),
        'bench_methods': ('--model', 'mbn_resnet50', '--nf-model', 'nf_resnet50', '--img-size', '224',
                          '--batch-size', '64', '--steps', '2', '--rounds', '3', '--warmup', '1'),
        'bench_memory': ('--methods', 'mbn', 'fast_advprop', '--img-size', '224', '--batch-size', '32', '--steps', '2',
                         '--deep-model', 'resnet338', '--deep-batch-size', '4'),
    },
    train=('--model', 'mbn_resnet50', '-b', '32', '--num-samples', '16', '--workers', '4'),
    images_per_class=(32, 4),
    img_size=224,
    compile_backend='inductor',
    total_seconds=570,
    timeouts={'install': 60, 'environment': 60, 'cuda tier': 180, 'bench_split_bn': 60, 'bench_attack': 60,
              'bench_eval': 90, 'bench_methods': 75, 'bench_memory': 90, 'train': 75, 'train --torchcompile': 150,
              'validate': 60},
)
TINY_SIZES = Sizes(
    benchmarks={
        'bench_split_bn': ('--model', 'test_resnet', '--img-size', '16', '--batch-size', '8', '--rounds', '1',
                           '--warmup', '0', '--threads', '1'),
        'bench_attack': ('--model', 'test_resnet', '--img-size', '16', '--batch-size', '8', '--steps', '2',
                         '--rounds', '1', '--warmup', '0', '--threads', '1'),
        'bench_eval': ('--model', 'test_resnet', '--img-size', '16', '--batch-size', '16', '--train-steps', '5',
                       '--eps', '16', '--steps', '2', '--sweep', '2', '3', '--rounds', '1', '--warmup', '0',
                       '--threads', '1'),
        'bench_methods': ('--model', 'test_mbn_resnet', '--nf-model', 'test_nfr_resnet', '--methods', 'mbn',
                          'fast_advprop', '--img-size', '16', '--batch-size', '8', '--steps', '1', '--rounds', '1',
                          '--warmup', '0', '--threads', '1'),
        'bench_memory': ('--methods', 'mbn', '--model', 'test_resnet', '--mbn-model', 'test_mbn_resnet',
                         '--nf-model', 'test_nfr_resnet', '--img-size', '16', '--batch-size', '4', '--steps', '1',
                         '--no-deep'),
    },
    train=('--model', 'test_mbn_resnet', '-b', '4', '--num-samples', '4', '--workers', '0'),
    images_per_class=(4, 1),
    img_size=32,
    compile_backend='eager',
    total_seconds=900,
    timeouts={'install': 60, 'environment': 60, 'cuda tier': 120, 'bench_split_bn': 120, 'bench_attack': 120,
              'bench_eval': 120, 'bench_methods': 120, 'bench_memory': 180, 'train': 120, 'train --torchcompile': 180,
              'validate': 120},
)


@dataclass(frozen=True)
class Stage:
    """One step of the run: a command run from the repository root, or a function run in this process.

    Attributes:
        name: Its name in the report.
        command: The command (empty for `action`).
        action: Called instead of a command; what it returns is the stage's output.
        figures: Whether its output's tables go to the report (the benchmarks).
    """
    name: str
    command: Tuple[str, ...] = ()
    action: Optional[Callable[[], str]] = None
    figures: bool = False


@dataclass(frozen=True)
class Outcome:
    """What a stage did: ``passed``, ``failed``, ``timed out`` or ``not run``; its seconds and its output."""
    stage: Stage
    status: str
    seconds: float
    output: str

    @property
    def last_line(self) -> str:
        """The output's last non-empty line: the error of a failed stage."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        return lines[-1] if lines else ''


class _OneLineErrorParser(argparse.ArgumentParser):
    """Bad input as the package's commands report it: ``gpu_check.sh: error: <message>`` on stderr, exit status 2.

    Not `timm_advnorm.commands.parser.ArgumentParser`: this script runs before the wheels it installs, on the standard
    library.
    """

    def error(self, message: str):
        self.exit(2, f'{self.prog}: error: {message} (see --help)\n')


def get_args_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrorParser(prog=PROG, description=__doc__.split('\n')[0])
    parser.add_argument('outdir', nargs='?', type=Path, help='folder the report, logs and runs are written to')
    parser.add_argument('--prepare-wheels', type=Path, metavar='DIR',
                        help='download the wheels a bare machine lacks into DIR, build the project\'s own there, and '
                             'stop (needs network to PyPI)')
    parser.add_argument('--wheels', type=Path, metavar='DIR',
                        help='install the wheels of DIR first, offline, into a scratch folder (default: none)')
    parser.add_argument('--device', default='cuda', help='device of every stage (default: cuda)')
    parser.add_argument('--tiny', action='store_true', help='tiny models and data: a few minutes on a CPU')
    return parser


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse what cannot run, before anything is written (`parser.error`: one line, exit status 2)."""
    if args.prepare_wheels is not None:
        if args.outdir is not None or args.wheels is not None:
            parser.error('--prepare-wheels DIR takes no OUTDIR and no --wheels')
        return
    if args.outdir is None:
        parser.error('OUTDIR is required (or --prepare-wheels DIR)')
    if (args.outdir / REPORT).exists():
        parser.error(f'{args.outdir / REPORT} already exists; give a new OUTDIR')
    if args.wheels is not None and not sorted(args.wheels.glob('*.whl')):
        parser.error(f'--wheels {args.wheels}: no wheel there; make them with --prepare-wheels {args.wheels}')


def prepare_wheels(folder: Path) -> None:
    """Download `WHEEL_REQUIREMENTS` for the GPU machine (`WHEEL_TARGET`) and build the project's wheel into
    `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, '-m', 'pip']
    subprocess.run([*pip, 'download', '--no-deps', '--only-binary=:all:', *WHEEL_TARGET, '-d', str(folder),
                    *WHEEL_REQUIREMENTS], check=True)
    subprocess.run([*pip, 'wheel', '--no-deps', '-w', str(folder), str(REPO)], check=True)
    print('\n'.join(sorted(path.name for path in folder.glob('*.whl'))))


def _install_command(wheels: Path, site: Path) -> Tuple[str, ...]:
    return (sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile', '--no-cache-dir',
            '--upgrade', '--target', str(site), *map(str, sorted(wheels.glob('*.whl'))))


def _write_image_folder(root: Path, sizes: Sizes) -> Callable[[], str]:
    """The action writing the synthetic ImageNet-shaped folder (`tests/imagenet_layout.py`)."""

    def write() -> str:
        sys.path.insert(0, str(REPO / 'tests'))
        try:
            from imagenet_layout import write_imagenet_folder
        finally:
            sys.path.pop(0)
        write_imagenet_folder(root, images_per_class=sizes.images_per_class, size=sizes.img_size)
        return f'wrote {root}'
    return write


def build_stages(args: argparse.Namespace, sizes: Sizes, site: Optional[Path]) -> List[Stage]:
    """Every stage of the run, in order."""
    python, out = sys.executable, args.outdir
    device_args = ('--device', args.device, '--amp', '--channels-last')
    data = out / 'imagenet'
    stages = []
    if args.wheels is not None:
        stages.append(Stage('install', _install_command(args.wheels, site)))
    stages += [
        Stage('environment', (python, '-c', ENVIRONMENT_PROBE)),
        Stage('cuda tier', (python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-m', 'cuda', *CUDA_TIER)),
    ]
    stages += [Stage(name, (python, f'benchmarks/{name}.py', *bench_args, *device_args), figures=True)
               for name, bench_args in sizes.benchmarks.items()]
    train = (python, 'train_adv.py', '--dataset', '', '--data-dir', str(data), '--val-split', 'val', '--num-classes',
             '4', '--img-size', str(sizes.img_size), '--method', 'mbn', '--epochs', '1', '--attack-steps', '1',
             '--val-attack-steps', '1', '--log-interval', '0', '--no-progress', *sizes.train, *device_args,
             '--output', str(out / 'runs'))
    stages += [
        Stage('imagenet-shaped folder', action=_write_image_folder(data, sizes)),
        Stage('train', (*train, '--grad-checkpointing', '--experiment', 'train')),
        Stage('train --torchcompile', (*train, '--torchcompile', sizes.compile_backend, '--experiment', 'compiled')),
        Stage('validate', (python, 'validate_adv.py', '--checkpoint', str(out / 'runs' / 'train' / 'last.pth.tar'),
                           '--data-dir', str(data), '--val-split', 'val', '--protocol', 'xie2020', '--reduced',
                           '--gammas', '1', '--amp', '--num-samples', '4', '--sanity-samples', '0', '--workers', '0',
                           '--no-progress', '--device', args.device, '--results-file',
                           str(out / 'validate' / 'xie2020.json'))),
    ]
    return stages


def _stage_environment(site: Optional[Path]) -> Dict[str, str]:
    """The stages' environment, offline: this working tree, then the scratch folder of the wheels, first on
    ``PYTHONPATH`` (the tree's code is what the run checks, even where the project's own wheel is older)."""
    paths = [str(REPO)] + ([str(site)] if site is not None else [])
    paths += [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    return {**os.environ, 'PYTHONPATH': os.pathsep.join(paths), 'HF_HUB_OFFLINE': '1', 'PYTHONUNBUFFERED': '1'}


def run_stage(stage: Stage, timeout: float, env: Dict[str, str], log: Path) -> Outcome:
    """Run `stage` for at most `timeout` seconds (its whole process group is killed then); its output goes to `log`."""
    start = time.perf_counter()
    if stage.action is not None:
        try:
            output, status = stage.action(), 'passed'
        except Exception as e:  # the stage's failure is recorded, the run goes on
            output, status = f'{type(e).__name__}: {e}', 'failed'
    elif timeout <= 0:
        output, status = 'no time left of the run\'s budget', 'not run'
    else:
        process = subprocess.Popen(stage.command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout)
            status = 'passed' if process.returncode == 0 else 'failed'
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            output += f'\ntimed out after {timeout:.0f} s'
            status = 'timed out'
    log.write_text(f'$ {shlex.join(stage.command)}\n{output}' if stage.command else output)
    return Outcome(stage, status, time.perf_counter() - start, output)


def figures(output: str) -> List[str]:
    """The markdown tables a benchmark printed, each after its caption (the last other line printed before it: the
    settings it ran with), and its goal lines."""
    kept: List[str] = []
    caption, in_table = '', False
    for line in (line.rstrip() for line in output.splitlines()):
        if line.startswith('|'):
            if not in_table:
                kept += ([''] if kept else []) + ([caption, ''] if caption else [])
                caption = ''
            kept.append(line)
        elif line.startswith('Goal:'):
            kept += ['', line]
        elif line.strip():
            caption = line.strip()
        in_table = line.startswith('|')
    return kept


def render_report(mode: str, environment: Dict[str, object], outcomes: Sequence[Outcome], seconds: float) -> str:
    """``gpu_report.md``: environment, a table of the stages, then every benchmark's figures."""
    lines = ['# GPU check', '', f'Run {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {mode}, '
             f'{seconds:.0f} s in all.', '']
    for key in ('device', 'torch', 'cuda', 'timm', 'python', 'timm_advnorm'):
        lines.append(f'- {key}: {environment.get(key, "unknown (the environment stage failed)")}')
    lines += ['', '| stage | result | seconds | last line of its output (failures) |', '|---|---|---:|---|']
    for outcome in outcomes:
        detail = '' if outcome.status == 'passed' else outcome.last_line.replace('|', '\\|')
        lines.append(f'| {outcome.stage.name} | {outcome.status} | {outcome.seconds:.1f} | {detail} |')
    lines += ['', '## Figures', '', 'Each benchmark\'s tables as it printed them: ratios against the baseline it measured '
              'in the same run (absolute times are this device\'s).']
    for outcome in outcomes:
        if outcome.stage.figures:
            lines += ['', f'### {outcome.stage.name}', '', f'`{shlex.join(outcome.stage.command[1:])}`', '']
            lines += figures(outcome.output) if outcome.status == 'passed' else [f'No figures: {outcome.status}.']
    return '\n'.join(lines) + '\n'


def run(args: argparse.Namespace) -> bool:
    """Run every stage, print each one's time as it goes, write the report; whether every stage passed."""
    sizes = TINY_SIZES if args.tiny else GPU_SIZES
    (args.outdir / 'logs').mkdir(parents=True, exist_ok=True)
    site = Path(tempfile.mkdtemp(prefix='gpu_check_site_')) if args.wheels is not None else None
    env = _stage_environment(site)
    stages = build_stages(args, sizes, site)
    start = time.perf_counter()
    outcomes, environment = [], {}
    for index, stage in enumerate(stages, 1):
        left = sizes.total_seconds - (time.perf_counter() - start)
        print(f'[{index}/{len(stages)}] {stage.name} ...', flush=True)
        outcome = run_stage(stage, min(sizes.timeouts.get(stage.name, left), left), env,
                            args.outdir / 'logs' / f'{index:02d}-{stage.name.replace(" ", "_")}.log')
        if stage.name == 'environment' and outcome.status == 'passed':
            environment = json.loads(outcome.last_line)
        detail = '' if outcome.status == 'passed' else f': {outcome.last_line}'
        print(f'[{index}/{len(stages)}] {stage.name} {outcome.status} in {outcome.seconds:.1f} s{detail}', flush=True)
        outcomes.append(outcome)
    mode = f'{args.device}, {"tiny models" if args.tiny else "GPU sizes"}'
    report = render_report(mode, environment, outcomes, time.perf_counter() - start)
    (args.outdir / REPORT).write_text(report)
    print(f'\nwrote {args.outdir / REPORT}')
    return all(outcome.status == 'passed' for outcome in outcomes)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    check_args(args, parser)
    if args.prepare_wheels is not None:
        prepare_wheels(args.prepare_wheels)
        return 0
    return 0 if run(args) else 1


if __name__ == '__main__':
    sys.exit(main())
