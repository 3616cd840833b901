"""Peak memory of one training step per method against vanilla training with as many rows through the training forward.

An adversarial method's step holds what vanilla training holds for the rows of its training forward (activations
for the backward, gradients, optimizer state) plus its attack's working set: one iterate, one attack forward's
activations, a BN-folded copy of the model. An attack that kept its graph or its iterates alive would grow with
its iterations; the goal is that no method exceeds 1.10x vanilla at the same rows (the largest training forward of
the step: twice the batch for the methods training on clean and adversarial rows together, the loader batch for
Fast AdvProp, whose attack passes are training passes). Every method is built as the training command builds it
(its parsed options, `create_run_task`) and runs on the first of ``--model`` (plain BN), ``--mbn-model`` (mixture
BN) and ``--nf-model`` (normalizer-free) it accepts; vanilla runs on each of them at the rows the methods put through
it.

A deep model (``--deep-model``, vanilla step) is measured with and without timm's gradient checkpointing: the goal
is at most a third of the memory without.

Each case runs in a fresh process: one warm-up step (optimizer state, one-time caches), then the measured step,
whose peak counts above the memory in use once the model, the task and the batch are built: gradients, optimizer
state and what a method keeps between steps (its attack's BN-folded model) count with the step's working set. On
CUDA the peak is ``torch.cuda.max_memory_allocated``. On CPU it is the process's peak resident memory during the step
(reset through ``/proc/self/clear_refs``), with glibc's mmap threshold fixed at 64 KiB (``MALLOC_MMAP_THRESHOLD_``)
so that a freed tensor leaves the process at once instead of being kept by the allocator for a later one.

Example:
    python benchmarks/bench_memory.py --batch-size 8 --img-size 224 --steps 2
    python benchmarks/bench_memory.py --quick
"""
import argparse
import gc
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401  (registers the models and the methods)
from timm_advnorm.attacks import InputSpace
from timm_advnorm.layers import set_grad_checkpointing
from timm_advnorm.task import AdversarialClassificationTask, list_tasks
from timm_advnorm.commands.train import train_options
from timm_advnorm.train.build import create_run_task
from timm_advnorm.train.budget import memory_in_use_bytes, peak_memory_bytes, reset_peak_memory

from _common import add_device_args, add_record_args, recorded
from bench_methods import _training_args

NUM_CLASSES = 1000
#: Goals: a method's peak over vanilla's at the same rows, and the deep model's with checkpointing over without.
METHOD_GOAL = 1.10
CHECKPOINTING_GOAL = 1 / 3
#: ``--quick``: sizes of a smoke run.
QUICK = dict(img_size=64, batch_size=4, steps=1)
#: glibc's mmap threshold in the case processes (bytes): larger blocks are returned to the system when freed.
MMAP_THRESHOLD = 64 * 1024
#: Prefix of the line a case process prints its result on.
RESULT = 'bench_memory result: '


@dataclass(frozen=True)
class Case:
    """One measured step, run in a process of its own.

    Attributes:
        method: The training method.
        models: Models to try in order: the step runs on the first the method accepts.
        batch_size: ``--batch-size`` of the method (its loader batch is this times its `batch_scale`).
        rows: Rows of the batch, replacing the method's loader batch (vanilla at a method's rows); 0: the method's.
        img_size, steps, device, amp, channels_last: The run's settings (`steps`: attack iterations K).
        checkpointing: Turn on the model's gradient checkpointing.
    """
    method: str
    models: Tuple[str, ...]
    batch_size: int
    img_size: int
    steps: int
    device: str
    amp: bool
    channels_last: bool
    rows: int = 0
    checkpointing: bool = False


@dataclass(frozen=True)
class Result:
    """What a case measured: the model it ran on, the most rows one training forward took, the peak in bytes, and the
    bytes of the parameters' gradients and optimizer state within it (what no activation saving can shrink)."""
    model: str
    rows: int
    peak_bytes: int
    state_bytes: int


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--methods', nargs='+', choices=list_tasks(), default=list_tasks(),
                        help='methods to measure (default: every registered one)')
    parser.add_argument('--model', default='resnet50', help='plain-BN model, for the methods that train one')
    parser.add_argument('--mbn-model', default='mbn_resnet50', help='mixture-BN model, for the methods that need one')
    parser.add_argument('--nf-model', default='nf_resnet50', help='normalizer-free model, for NoFrost')
    parser.add_argument('--deep-model', default='resnet638', help='model of the gradient-checkpointing comparison')
    parser.add_argument('--deep-batch-size', type=int, default=2)
    parser.add_argument('--no-deep', action='store_true', help='skip the gradient-checkpointing comparison')
    parser.add_argument('--no-methods', action='store_true', help='skip the methods, measure the deep model only')
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--steps', type=int, default=2, help='K, attack iterations of the adversarial methods')
    add_device_args(parser, amp_help='bf16 autocast for the training step and the attack')
    quick = ', '.join(f'--{key.replace("_", "-")} {value}' for key, value in QUICK.items())
    parser.add_argument('--quick', action='store_true', help=f'smoke run: {quick}')
    add_record_args(parser)
    parser.add_argument('--case', help=argparse.SUPPRESS)  # internal: a case's JSON, run in this process
    return parser


class _TrainingRows:
    """Records the most rows one training forward of `model` took: a forward with gradients on and the parameters
    trainable. Attack forwards run with the parameters frozen (or on a BN-folded copy), so they are not counted;
    Fast AdvProp's attack passes are training passes, and are."""

    def __init__(self, model: nn.Module):
        self.rows = 0
        self._first_parameter = next(model.parameters())
        model.register_forward_pre_hook(self._record)

    def _record(self, module: nn.Module, inputs: Tuple[torch.Tensor, ...]) -> None:
        if torch.is_grad_enabled() and self._first_parameter.requires_grad:
            self.rows = max(self.rows, inputs[0].shape[0])


def _build(case: Case, device: torch.device) -> Tuple[str, nn.Module, AdversarialClassificationTask]:
    """The first of the case's models the method accepts, on `device`, and the method's task on it."""
    training_args = _training_args(case.method, case.steps)
    amp_dtype = torch.bfloat16 if case.amp else None
    for name in case.models:
        model = timm.create_model(name, num_classes=NUM_CLASSES).to(device)
        if case.channels_last:
            model.to(memory_format=torch.channels_last)
        if case.checkpointing:
            set_grad_checkpointing(model)
        space = InputSpace.from_model(model)
        try:
            task = create_run_task(train_options(training_args), model, space, num_classes=NUM_CLASSES,
                                   amp_dtype=amp_dtype, device=device, verbose=False)
        except ValueError:  # a model the method refuses (NoFrost: one with batch norm; MBN: one without)
            continue
        return name, model, task
    raise ValueError(f'{case.method} accepts none of {", ".join(case.models)}')


def _batch(space: InputSpace, rows: int, case: Case, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = space.from_pixels(torch.rand(rows, 3, case.img_size, case.img_size, generator=generator)).to(device)
    if case.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, NUM_CLASSES, (rows,), generator=generator).to(device)


def _step_fn(task: AdversarialClassificationTask, optimizer: torch.optim.Optimizer,
             batch: Tuple[torch.Tensor, torch.Tensor], amp: bool, device: torch.device) -> Callable[[], None]:
    """One training step as the training loop runs it: attack, task forward, backward, SGD with momentum."""

    def step() -> None:
        task.train()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = task(*batch)['loss']
        loss.backward()
        task.finalize_gradients()
        optimizer.step()
    return step


def _settle(device: torch.device) -> None:
    """Let go of what is already dead (Python cycles, queued device work) before memory is read."""
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def run_case(case: Case) -> Result:
    """Measure the case's step in this process: the peak memory of the step after a warm-up one, above the memory in
    use once the model, the task and the batch were built (so gradients, optimizer state and whatever the method
    keeps between steps count, with the step's own working set)."""
    device = torch.device(case.device)
    name, model, task = _build(case, device)
    rows = case.rows or int(round(case.batch_size * task.batch_scale))
    training_rows = _TrainingRows(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    step = _step_fn(task, optimizer, _batch(InputSpace.from_model(model), rows, case, device), case.amp, device)
    _settle(device)
    baseline = memory_in_use_bytes(device)
    step()
    _settle(device)
    reset_peak_memory(device)
    step()
    _settle(device)
    return Result(name, training_rows.rows, peak_memory_bytes(device) - baseline, _state_bytes(model, optimizer))


def _state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the parameters' gradients and the optimizer's state tensors (momentum)."""
    grads = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)
    return grads + sum(t.nbytes for state in optimizer.state.values() for t in state.values()
                       if isinstance(t, torch.Tensor))


def _in_new_process(case: Case) -> Result:
    """`run_case` in a fresh Python process (this script with ``--case``), with glibc's mmap threshold fixed."""
    print(f'{case.method} on {" or ".join(case.models)}{f" at {case.rows} rows" if case.rows else ""}'
          f'{" with gradient checkpointing" if case.checkpointing else ""}', file=sys.stderr, flush=True)
    env = {**os.environ, 'MALLOC_MMAP_THRESHOLD_': str(MMAP_THRESHOLD)}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), '--case', json.dumps(asdict(case))],
                          env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode or not lines:
        raise RuntimeError(f'case {case} failed (exit status {done.returncode}):\n{done.stderr[-4000:]}')
    return Result(**json.loads(lines[-1][len(RESULT):]))


def _methods_table(results: Dict[str, Result], vanilla: Dict[Tuple[str, int], Result]) -> List[str]:
    """Markdown rows: each vanilla baseline, then each method beside vanilla on its model at its rows."""
    lines = ['| method | model | rows | peak MB | × vanilla |', '|---|---|---:|---:|---:|']
    for (model, rows), result in sorted(vanilla.items()):
        lines.append(f'| vanilla | {model} | {rows} | {_mb(result.peak_bytes)} | 1.00 |')
    for method, result in results.items():
        ratio = result.peak_bytes / vanilla[(result.model, result.rows)].peak_bytes
        lines.append(f'| {method} | {result.model} | {result.rows} | {_mb(result.peak_bytes)} | {ratio:.2f} |')
    return lines


def _mb(value: int) -> str:
    return f'{value / 2 ** 20:,.0f}'


def _deep_table(model: str, without: Result, with_checkpointing: Result) -> List[str]:
    """Markdown rows: the whole step's peak, and its part above the gradients and optimizer state (activations and
    the backward's working set), each beside the run without checkpointing."""
    lines = ['| model | gradient checkpointing | rows | peak MB | × without | peak above gradients + momentum, MB '
             '| × without |', '|---|---|---:|---:|---:|---:|---:|']
    for name, result in (('off', without), ('on', with_checkpointing)):
        above = result.peak_bytes - result.state_bytes
        lines.append(f'| {model} | {name} | {result.rows} | {_mb(result.peak_bytes)} | '
                     f'{result.peak_bytes / without.peak_bytes:.2f} | {_mb(above)} | '
                     f'{above / (without.peak_bytes - without.state_bytes):.2f} |')
    return lines


def _measure_methods(args: argparse.Namespace, base: Case) -> List[str]:
    """Run every method, then vanilla at the rows each one put through its model; the table and the goal line."""
    models = (args.model, args.mbn_model, args.nf_model)
    methods = [m for m in args.methods if m != 'vanilla']
    results = {m: _in_new_process(replace(base, method=m, models=models)) for m in methods}
    needed = {(args.model, args.batch_size)} | {(r.model, r.rows) for r in results.values()}
    vanilla = {(model, rows): _in_new_process(replace(base, method='vanilla', models=(model,), rows=rows))
               for model, rows in sorted(needed)}
    over = [m for m, r in results.items() if r.peak_bytes > METHOD_GOAL * vanilla[(r.model, r.rows)].peak_bytes]
    goal = f'Goal: every method <= {METHOD_GOAL:.2f}x vanilla at the same rows: ' + (
        f'missed by {", ".join(over)}.' if over else 'met.')
    return _methods_table(results, vanilla) + ['', goal]


def _measure_deep(args: argparse.Namespace, base: Case) -> List[str]:
    """Vanilla steps of the deep model without and with gradient checkpointing; the table and the goal line."""
    deep = replace(base, method='vanilla', models=(args.deep_model,), batch_size=args.deep_batch_size)
    without = _in_new_process(deep)
    with_checkpointing = _in_new_process(replace(deep, checkpointing=True))
    met = with_checkpointing.peak_bytes <= CHECKPOINTING_GOAL * without.peak_bytes
    state = f'{_mb(without.state_bytes)} MB of gradients and momentum, which checkpointing cannot shrink'
    return _deep_table(args.deep_model, without, with_checkpointing) + [
        '', f'Goal: with checkpointing <= 1/3 of without: {"met" if met else "missed"} (the peak includes {state}).']


def _settings(args: argparse.Namespace) -> str:
    peak = 'torch.cuda.max_memory_allocated' if args.device.startswith('cuda') else 'peak resident memory'
    return (f'{args.img_size}px, batch {args.batch_size}, K = {args.steps}, {args.device}, '
            f'{"bf16 autocast" if args.amp else "fp32"}{", channels_last" if args.channels_last else ""}, '
            f'torch {torch.__version__}; peak: {peak} during the second step above the memory in use once the '
            f'model was built, a fresh process per case')


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = get_args_parser()
    args = parser.parse_args(argv)
    if args.case:
        case = json.loads(args.case)
        print(RESULT + json.dumps(asdict(run_case(Case(**{**case, 'models': tuple(case['models'])})))))
        return
    with recorded('bench_memory', parser, args, argv, args.device):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    base = Case(method='vanilla', models=(), batch_size=args.batch_size, img_size=args.img_size, steps=args.steps,
                device=args.device, amp=args.amp, channels_last=args.channels_last)
    lines = [_settings(args), '']
    if not args.no_methods:
        lines += _measure_methods(args, base)
    if not args.no_deep:
        lines += ['', f'{args.deep_model}, batch {args.deep_batch_size}:', ''] + _measure_deep(args, base)
    print('\n' + '\n'.join(lines))


if __name__ == '__main__':
    main()
