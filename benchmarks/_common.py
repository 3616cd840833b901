"""What the benchmarks share: run arguments, the interleaved timing loop, torchattacks' PGD as a reference, and
``--record``, which commits a run's tables for the documentation site.

The scripts run as ``python benchmarks/bench_*.py``, which puts this folder on ``sys.path``: import it as
``from _common import ...``.

``--record DIR`` writes ``DIR/<benchmark>.md``, what the script printed on stdout (its tables) under a heading that
names the command, and ``DIR/<benchmark>.environment.json``, what it ran on: the code's commit, the machine, the
library versions and the load average at the start and at the end (`write_record`). The documentation's benchmarks
page inserts the Markdown file (``.. recorded-table::``), so a figure on it is a committed file, not typed prose. An
existing record is replaced only with ``--overwrite``; the check runs before the benchmark, so a refused run costs
nothing.
"""
import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

import torch
import torch.nn as nn

from timm_advnorm.attacks import InputSpace
from timm_advnorm.study.provenance import checkout_changes, machine
from timm_advnorm.write_guard import atomic_write, check_creatable

#: What a record's environment file is called, after the benchmark's name.
ENVIRONMENT_SUFFIX = '.environment.json'

Result = TypeVar('Result')


def add_device_args(parser: argparse.ArgumentParser, amp_help: str) -> None:
    """``--device``, ``--amp`` (bf16 autocast, where `amp_help` says) and ``--channels-last``."""
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--amp', action='store_true', help=amp_help)
    parser.add_argument('--channels-last', action='store_true')


def add_timing_args(parser: argparse.ArgumentParser, rounds: int = 3, warmup: int = 1, unit: str = 'method') -> None:
    """``--rounds`` timed after ``--warmup`` untimed ones, each running every `unit` once, and ``--threads``."""
    parser.add_argument('--rounds', type=int, default=rounds, help=f'timed rounds (each times every {unit} once)')
    parser.add_argument('--warmup', type=int, default=warmup, help='untimed rounds first')
    parser.add_argument('--threads', type=int, default=0, help='torch CPU threads (0: torch default)')


def apply_run_args(args: argparse.Namespace) -> Tuple[torch.device, torch.memory_format, Optional[torch.dtype]]:
    """Apply ``--threads`` and ``--seed``; return the device, memory format and autocast dtype the arguments ask for."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    return torch.device(args.device), memory_format, torch.bfloat16 if args.amp else None


def timed(fn: Callable[[], Result], device: torch.device,
          clock: Callable[[], float] = time.perf_counter) -> Tuple[float, Result]:
    """Seconds `fn` takes by `clock`, waiting for queued accelerator work before and after, and what it returned."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = clock()
    result = fn()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return clock() - start, result


def measure(
        methods: Mapping[str, Callable[[], Result]],
        device: torch.device,
        warmup: int,
        rounds: int,
        clock: Callable[[], float] = time.perf_counter,
) -> Tuple[Dict[str, List[float]], Dict[str, Result]]:
    """Seconds per call of every method over the timed rounds, and what each method returned last.

    Methods are interleaved round by round, so background load hits every method alike.
    """
    times: Dict[str, List[float]] = {name: [] for name in methods}
    results: Dict[str, Result] = {}
    for i in range(warmup + rounds):
        for name, fn in methods.items():
            elapsed, results[name] = timed(fn, device, clock)
            if i >= warmup:
                times[name].append(elapsed)
    return times, results


def torchattacks_pgd(model: nn.Module, space: InputSpace, eps: float, step: float, steps: int,
                     random_start: bool = True):
    """torchattacks' PGD (last iterate; a random start unless `random_start` is off: BIM) taking and returning
    normalized inputs, as our attacks do.

    With ``set_normalization_used``, torchattacks 3.5 un-normalizes its input, attacks in [0, 1] and normalizes the
    result. It restores the train mode of the model it is given after each call, so `model` is passed as is: a
    fresh ``nn.Sequential`` wrapper (``training=True``) would leave it in train mode.

    Args:
        model: The classifier, taking normalized inputs.
        space: The model's input normalization.
        eps: L-inf budget on the 0-255 scale.
        step: Step size on the 0-255 scale.
        steps: Iterations.

    Raises:
        ImportError: torchattacks is not installed (a dev dependency: ``pip install torchattacks --no-deps``).
    """
    import torchattacks

    attack = torchattacks.PGD(model, eps=eps / 255, alpha=step / 255, steps=steps, random_start=random_start)
    attack.set_normalization_used(mean=list(space.mean), std=list(space.std))
    return attack


def add_record_args(parser: argparse.ArgumentParser) -> None:
    """``--record DIR`` and ``--overwrite`` (see the module's docstring)."""
    parser.add_argument('--record', metavar='DIR',
                        help='also write the printed tables to DIR/<benchmark>.md and what they ran on to '
                             f'DIR/<benchmark>{ENVIRONMENT_SUFFIX}')
    parser.add_argument('--overwrite', action='store_true', help='with --record: replace an existing record')


def record_paths(folder: Path, benchmark: str) -> Tuple[Path, Path]:
    """The Markdown file and the environment file of `benchmark`'s record in `folder`."""
    return folder / f'{benchmark}.md', folder / f'{benchmark}{ENVIRONMENT_SUFFIX}'


def check_record(folder: Path, benchmark: str, overwrite: bool) -> None:
    """Check that `benchmark`'s record can be written into `folder`, creating nothing.

    Raises:
        ValueError: The record exists and `overwrite` is off, or the folder takes no files: one line.
    """
    for path in record_paths(folder, benchmark):
        if path.exists() and not overwrite:
            raise ValueError(f'{path} exists: pass --overwrite to replace the record')
        check_creatable(path, 'file')


def shown_command(benchmark: str, argv: Sequence[str]) -> str:
    """The command line that ran `benchmark` with `argv`, as a user types it from the checkout's root, without the
    recording options (they change where the tables go, not what they say)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == '--record':
            skip = True
        elif arg != '--overwrite' and not arg.startswith('--record='):
            kept.append(arg)
    return shlex.join(['python', f'benchmarks/{benchmark}.py', *kept])


def checkout_state() -> Dict[str, Any]:
    """The checkout's commit, its uncommitted changes to tracked files (``changed``), and whether any of them is to
    code (``dirty``): the documentation's pages and records (``docs/``, ``*.md``) change no measured figure, and an
    earlier benchmark's record is one of them. ``commit`` is None where git or the checkout is missing."""
    checkout = checkout_changes()
    if checkout is None:
        return {'commit': None, 'dirty': None, 'changed': []}
    commit, changed = checkout
    code = [path for path in changed if not (path.startswith('docs/') or path.endswith('.md'))]
    return {'commit': commit, 'dirty': bool(code), 'changed': changed}


def environment(command: str, device: str) -> Dict[str, Any]:
    """What a run starts on: the checkout, the `command` line, the date, the machine and its load, the libraries."""
    import torchvision

    return {'checkout': checkout_state(),
            'command': command,
            'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
            'machine': {key: value for key, value in machine().items() if key != 'threads'},  # at the end
            'torchvision': torchvision.__version__, 'device': device,
            'cuda_device': torch.cuda.get_device_name(device) if device.startswith('cuda') else None,
            'niceness': os.nice(0),
            'thread_variables': {name: os.environ[name] for name in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')
                                 if name in os.environ},
            'load_average_at_start': [round(load, 2) for load in os.getloadavg()]}


def finish_environment(started: Mapping[str, Any], wall_s: float) -> Dict[str, Any]:
    """`started` (`environment`) completed at the run's end: its wall time, the load average then, and torch's CPU
    threads as the benchmark set them."""
    return {**started, 'wall_s': round(wall_s, 1), 'torch_threads': torch.get_num_threads(),
            'load_average_at_end': [round(load, 2) for load in os.getloadavg()]}


def write_record(folder: Path, benchmark: str, command: str, printed: str, env: Mapping[str, Any],
                 overwrite: bool = False) -> Tuple[Path, Path]:
    """Write `benchmark`'s record into `folder`, each file atomically: the Markdown file (a heading naming `command`,
    then `printed`, the tables as the script printed them) and the environment file (`env` as JSON).

    Returns:
        The Markdown file and the environment file.

    Raises:
        ValueError: The record exists and `overwrite` is off (`check_record`).
        WriteError: An OS error while writing; a record that did not exist before is not left half made.
    """
    check_record(folder, benchmark, overwrite)
    markdown, env_path = record_paths(folder, benchmark)
    text = f'# {benchmark}: `{command}`\n\n{printed.strip()}\n'
    new_env = not env_path.exists()
    atomic_write(env_path, lambda tmp: tmp.write_text(json.dumps(env, indent=2) + '\n', encoding='utf-8'))
    try:
        atomic_write(markdown, lambda tmp: tmp.write_text(text, encoding='utf-8'))
    except BaseException:
        if new_env:
            env_path.unlink(missing_ok=True)
        raise
    return markdown, env_path


class _Tee(io.TextIOBase):
    """Writes to `stream` and keeps a copy of what was written."""

    def __init__(self, stream: io.TextIOBase):
        super().__init__()
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def recorded(benchmark: str, parser: argparse.ArgumentParser, args: argparse.Namespace,
             argv: Optional[Sequence[str]], device: str = 'cpu') -> Iterator[None]:
    """Run the benchmark's body; with ``--record``, write what it printed on stdout as its record when it ends.

    The record is checked before the body runs: an existing one (without ``--overwrite``) or a folder that takes no
    files ends the script at once with ``PROG: error: MESSAGE`` and exit status 2, as the package's commands do. A
    body that fails writes no record.

    Args:
        benchmark: The script's name without ``.py`` (``bench_eval``): the record's name.
        parser: The script's parser (its ``prog`` starts the error line).
        args: The parsed arguments (``record``, ``overwrite``).
        argv: The arguments given (None: ``sys.argv[1:]``), for the record's heading.
        device: The device the benchmark runs on.
    """
    if not args.record:
        yield
        return
    folder = Path(args.record)
    try:
        check_record(folder, benchmark, args.overwrite)
    except ValueError as error:
        parser.exit(2, f'{parser.prog}: error: {error}\n')
    argv = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    env = environment(shlex.join(['python', f'benchmarks/{benchmark}.py', *argv]), device)
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    command = shown_command(benchmark, argv)
    try:
        paths = write_record(folder, benchmark, command, tee.copy.getvalue(),
                             finish_environment(env, time.perf_counter() - start), args.overwrite)
    except (ValueError, OSError) as error:
        parser.exit(2, f'{parser.prog}: error: {error}\n')
    print(f'Recorded {paths[0]} and {paths[1]}.', file=sys.stderr)
