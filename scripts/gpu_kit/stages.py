"""What the kit runs: its stages, in order of value per second, and the sizes they run at on a GPU or the CPU.

The order is the order a short window wants answers in: the machine (environment), the device test tier, the
benchmarks' figures, an eager training run, its evaluation, and last the least certain and slowest stage, the
training run compiled with torch.compile (a cold compile of a ResNet-50's training, attack and evaluation graphs).
"""
import importlib.machinery
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from .wheels import REPO

Command = Tuple[str, ...]
#: Printed as JSON by the ``environment`` stage, run with the interpreter and ``PYTHONPATH`` of every stage: the
#: machine, the versions the stages run with, and every installed package's version.
ENVIRONMENT_PROBE = '''
import importlib.metadata, json, os, platform, subprocess
import torch, torchvision, timm, timm_advnorm
cuda = torch.cuda.is_available()
try:
    driver = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                            capture_output=True, text=True, timeout=20).stdout.strip() or 'unknown'
except (OSError, subprocess.SubprocessError):
    driver = 'none (no nvidia-smi)'
packages = {d.metadata['Name']: d.version for d in importlib.metadata.distributions() if d.metadata['Name']}
print(json.dumps({
    'device': torch.cuda.get_device_name(0) if cuda else platform.processor() or platform.machine(),
    'driver': driver, 'cpus': os.cpu_count(), 'python': platform.python_version(),
    'torch': torch.__version__, 'cuda': torch.version.cuda or 'none', 'cuda_available': cuda,
    'cudnn': str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else 'none',
    'torchvision': torchvision.__version__, 'timm': timm.__version__, 'timm_advnorm': timm_advnorm.__file__,
    'packages': dict(sorted(packages.items(), key=lambda item: item[0].lower()))}))
'''
#: Stage names, in the order they run.
STAGE_NAMES = ('install', 'environment', 'device-tier', 'bench_split_bn', 'bench_attack', 'bench_eval',
               'bench_methods', 'bench_memory', 'imagenet-folder', 'train', 'validate', 'train-compiled')


@dataclass(frozen=True)
class Sizes:
    """What the stages run on, and how long each is expected and allowed to take.

    Attributes:
        benchmarks: Arguments of each benchmark script (``benchmarks/<name>.py``) besides the device options.
        train: Arguments of the training runs besides the data, device and output options.
        images_per_class: Images per class of the synthetic folder's ``train/`` and ``val/``.
        img_size: Side of its images and of the training input.
        estimates: Seconds each stage is expected to take: a stage starts only when its estimate fits the budget
            left. The compiled run's estimate is per backend (`compile_estimates`).
        compile_estimates: Seconds the compiled training run is expected to take, by ``--torchcompile`` backend.
        timeouts: Seconds each stage may take at most (and never more than the budget left).
        test_timeout: Seconds one test of the device tier may take where pytest-timeout is installed.
    """
    benchmarks: Dict[str, Command]
    train: Command
    images_per_class: Tuple[int, int]
    img_size: int
    estimates: Dict[str, float]
    compile_estimates: Dict[str, float]
    timeouts: Dict[str, float]
    test_timeout: float

    def estimate(self, stage: str, compile_backend: str) -> float:
        if stage == 'train-compiled':
            return self.compile_estimates.get(compile_backend, max(self.compile_estimates.values()))
        return self.estimates[stage]


#: A GPU (an H100 is what the windows lend). No line has run on one yet: the estimates are guesses, sized so that the
#: default budget of 360 s runs every stage but the compiled one (with ten seconds to spare for the kit's start-up and
#: its CUDA probe), which a second call runs alone.
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
    estimates={'install': 15, 'environment': 15, 'device-tier': 80, 'bench_split_bn': 20, 'bench_attack': 20,
               'bench_eval': 40, 'bench_methods': 30, 'bench_memory': 40, 'imagenet-folder': 5, 'train': 40,
               'validate': 30},
    compile_estimates={'inductor': 150, 'eager': 60},
    timeouts={'install': 60, 'environment': 60, 'device-tier': 180, 'bench_split_bn': 60, 'bench_attack': 60,
              'bench_eval': 90, 'bench_methods': 75, 'bench_memory': 90, 'imagenet-folder': 30, 'train': 75,
              'validate': 60, 'train-compiled': 240},
    test_timeout=150,
)
#: Tiny models on the CPU; estimates measured on the 2-core CI machine (inductor: a C++ compile of the step).
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
    estimates={'install': 10, 'environment': 5, 'device-tier': 25, 'bench_split_bn': 5, 'bench_attack': 6,
               'bench_eval': 8, 'bench_methods': 6, 'bench_memory': 26, 'imagenet-folder': 1, 'train': 7,
               'validate': 7},
    compile_estimates={'inductor': 60, 'eager': 9},
    timeouts={'install': 60, 'environment': 60, 'device-tier': 180, 'bench_split_bn': 120, 'bench_attack': 120,
              'bench_eval': 120, 'bench_methods': 120, 'bench_memory': 180, 'imagenet-folder': 60, 'train': 120,
              'validate': 120, 'train-compiled': 300},
    test_timeout=120,
)


@dataclass(frozen=True)
class Stage:
    """One step of the run: a command run from the repository root, or a function run in the kit's process.

    Attributes:
        name: Its name (`STAGE_NAMES`), in the report and for ``--stages``.
        command: The command, or a function returning it when the stage starts (what it needs may be installed by
            an earlier stage). Empty for `action`.
        action: Called instead of a command; what it returns is the stage's output.
        figures: Whether its output's tables go to the report (the benchmarks).
        junit: The JUnit XML its pytest writes: a tier whose tests all skipped has not passed.
        requires: Stages that must have passed before it can run.
    """
    name: str
    command: Union[Command, Callable[[], Command]] = ()
    action: Optional[Callable[[], str]] = None
    figures: bool = False
    junit: Optional[Path] = None
    requires: Tuple[str, ...] = ()

    def resolve_command(self) -> Command:
        return self.command() if callable(self.command) else self.command


def _write_image_folder(root: Path, sizes: Sizes) -> Callable[[], str]:
    """The action writing the synthetic ImageNet-shaped folder (``tests/imagenet_layout.py``)."""

    def write() -> str:
        sys.path.insert(0, str(REPO / 'tests'))
        try:
            from imagenet_layout import write_imagenet_folder
        finally:
            sys.path.pop(0)
        write_imagenet_folder(root, images_per_class=sizes.images_per_class, size=sizes.img_size)
        return f'wrote {root}'
    return write


def _tier_command(device: str, junit: Path, site: Optional[Path], test_timeout: float) -> Callable[[], Command]:
    """The device tier's pytest command, decided when it starts (after the wheels are installed): the CUDA tier on a
    GPU, its CPU twin on the CPU; verbose, so that a hung test is the last line of its log, with a per-test timeout
    where pytest-timeout is installed."""

    def command() -> Command:
        if device.startswith('cuda'):
            tests = ('-m', 'cuda', *sorted(str(path.relative_to(REPO)) for path in REPO.glob('tests/test_cuda_*.py')))
        else:
            tests = ('tests/test_device_checks.py',)
        search_path = ([str(site)] if site is not None else []) + sys.path
        has_timeout = importlib.machinery.PathFinder.find_spec('pytest_timeout', search_path) is not None
        timeout = (f'--timeout={test_timeout:.0f}',) if has_timeout else ()
        return (sys.executable, '-m', 'pytest', '-v', '-rA', '--durations=20', '-p', 'no:cacheprovider',
                f'--junitxml={junit}', *timeout, *tests)
    return command


def build_stages(device: str, sizes: Sizes, scratch: Path, compile_backend: str, install: Optional[Command] = None,
                 site: Optional[Path] = None) -> List[Stage]:
    """Every stage of a run on `device`, in order; runs, data and the tier's JUnit file go under `scratch`."""
    python = sys.executable
    device_args = ('--device', device, '--amp', '--channels-last')
    data, runs = scratch / 'imagenet', scratch / 'runs'
    junit = scratch / 'junit.xml'
    stages = [Stage('install', install)] if install is not None else []
    stages += [
        Stage('environment', (python, '-c', ENVIRONMENT_PROBE)),
        Stage('device-tier', _tier_command(device, junit, site, sizes.test_timeout), junit=junit),
    ]
    stages += [Stage(name, (python, f'benchmarks/{name}.py', *bench_args, *device_args), figures=True)
               for name, bench_args in sizes.benchmarks.items()]
    train = (python, 'train_adv.py', '--dataset', '', '--data-dir', str(data), '--val-split', 'val', '--num-classes',
             '4', '--img-size', str(sizes.img_size), '--method', 'mbn', '--epochs', '1', '--attack-steps', '1',
             '--val-attack-steps', '1', '--log-interval', '0', '--no-progress', *sizes.train, *device_args,
             '--output', str(runs))
    stages += [
        Stage('imagenet-folder', action=_write_image_folder(data, sizes)),
        Stage('train', (*train, '--grad-checkpointing', '--experiment', 'train'), requires=('imagenet-folder',)),
        Stage('validate', (python, 'validate_adv.py', '--checkpoint', str(runs / 'train' / 'last.pth.tar'),
                           '--data-dir', str(data), '--val-split', 'val', '--protocol', 'xie2020', '--reduced',
                           '--gammas', '1', '--amp', '--num-samples', '4', '--sanity-samples', '0', '--workers', '0',
                           '--no-progress', '--device', device, '--results-file',
                           str(scratch / 'validate' / 'xie2020.json')), requires=('train',)),
        Stage('train-compiled', (*train, '--torchcompile', compile_backend, '--experiment', 'compiled'),
              requires=('imagenet-folder',)),
    ]
    return stages


def select_stages(stages: List[Stage], names: Optional[List[str]]) -> List[Stage]:
    """The stages `names` asks for, with every stage they require and the install and environment stages (all
    stages when `names` is None), in run order."""
    if names is None:
        return stages
    by_name = {stage.name: stage for stage in stages}
    wanted = {'install', 'environment', *names}
    pending = list(names)
    while pending:
        for required in by_name[pending.pop()].requires:
            if required not in wanted:
                wanted.add(required)
                pending.append(required)
    return [stage for stage in stages if stage.name in wanted]
