"""What a training run will cost, before it runs (``train_adv.py ... --plan``), and what it did cost, in its folder.

The papers count training cost in forward+backward passes per image (`AdversarialClassificationTask.passes_per_image`:
vanilla 1, PGD-K adversarial training K + 1, AdvProp K + 2, Fast AdvProp ``p_adv * K + 1``). A run's budget is that
unit times the images it trains: passes per image × images per epoch × epochs, and, in FLOPs, times what one pass of
the model costs per image (torch's `FlopCounterMode` on one forward+backward at the batch's shape, counted on a
meta-device copy of the model: no compute, nothing of the model touched).

`plan_budget` adds what only running shows, and runs no attack in full, so that planning a PGD-100000 run costs what
planning PGD-1 does: the time of a step is projected from one batch's forward+backward pass of the model, timed, times
the step's passes (the cost model), plus the optimizer's update, timed alone; the FLOPs a real step counts (an attack
iteration computes no parameter gradients, so it costs less than the papers' pass) and its peak memory come from real
steps with the attack cut to one and two iterations (`AdversarialClassificationTask.attack_steps_at_most`). It
projects the wall time of an epoch and of the run on ``world_size`` processes of this device. It trains the task on
the batch it is given, so it is for a run that stops there (``--plan``). A real run records the counted part
(`count_budget`) in its folder, ``budget.yaml``, and its measured epochs beside it (`RunBudget.record_epoch`).
`plan_validation` projects the validation each epoch runs (a clean batch timed, an attacked one from one timed
iteration of the validation attack times its iterations): on the digits, robust validation can cost more than the
training it validates.

Peak memory is what the device's allocator had handed out at most during the step (CUDA), or the process's peak
resident memory (CPU; on Linux the peak is reset before the step through ``/proc/self/clear_refs``).
"""
import copy
import math
import resource
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import yaml
from timm.utils.model import unwrap_model
from torch.utils.flop_counter import FlopCounterMode

from ..attacks import cross_entropy_per_sample, input_gradient
from ..attacks.base import Attack
from ..durations import duration_text, seconds_text
from ..layers.routing import route
from ..task import AdversarialClassificationTask
from ..timing import synchronize, timed_seconds
from .console import attack_label
from .loop import LossScaler, train_one_epoch, validate

__all__ = ['RunBudget', 'attack_pass_seconds', 'count_budget', 'flop_counter', 'flops_per_pass', 'memory_in_use_bytes',
           'peak_memory_bytes', 'plan_budget', 'plan_validation', 'reset_peak_memory', 'steps_per_epoch',
           'training_pass_seconds', 'validation_batches', 'write_budget']

Record = Dict[str, Union[str, int, float, None]]

_PROC_STATUS = Path('/proc/self/status')
_PROC_CLEAR_REFS = Path('/proc/self/clear_refs')
# Writing this to clear_refs resets the process's peak resident set size (Linux >= 4.0).
_RESET_PEAK_RSS = '5'
# Peak above the resident memory right after a reset that took effect (pages touched between the two reads).
_RESET_SLACK = 8 * 2 ** 20


def _proc_status_bytes(key: str) -> Optional[int]:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    if not _PROC_STATUS.exists():
        return None
    for line in _PROC_STATUS.read_text().splitlines():
        if line.startswith(f'{key}:'):
            return int(line.split()[1]) * 1024
    return None


def _max_rss_bytes() -> int:
    """The process's peak resident memory since it started (``ru_maxrss``: kB on Linux, bytes on macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == 'darwin' else 1024)


def reset_peak_memory(device: torch.device) -> bool:
    """Start a new peak: the CUDA allocator's, or on CPU the process's peak resident memory where the kernel lets a
    process reset it (Linux); elsewhere the CPU peak stays the one since the process started.

    Returns:
        Whether the peak now starts here (False where the kernel refused or ignored the CPU reset).
    """
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
        return True
    if not _PROC_CLEAR_REFS.exists():
        return False
    try:
        _PROC_CLEAR_REFS.write_text(_RESET_PEAK_RSS)
    except OSError:  # a sandbox may refuse it: the peak then counts from the process's start
        return False
    peak, now = _proc_status_bytes('VmHWM'), _proc_status_bytes('VmRSS')
    return peak is not None and now is not None and peak - now <= _RESET_SLACK


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory since `reset_peak_memory`: bytes the CUDA allocator handed out, or the process's resident bytes."""
    if device.type == 'cuda':
        return torch.cuda.max_memory_allocated(device)
    return _proc_status_bytes('VmHWM') or _max_rss_bytes()


def memory_in_use_bytes(device: torch.device) -> int:
    """Memory in use now: bytes allocated on the CUDA device, or the process's resident bytes (Linux; elsewhere its
    peak, the best bound available)."""
    if device.type == 'cuda':
        return torch.cuda.memory_allocated(device)
    return _proc_status_bytes('VmRSS') or _max_rss_bytes()


def steps_per_epoch(train_images: int, batch_size: int, world_size: int = 1) -> int:
    """Training steps (loader batches) per epoch of each process: timm's training loader shards the images evenly over
    the processes (the distributed sampler pads the last shard) and drops each shard's last partial batch. Under
    ``--grad-accum-steps N`` the optimizer updates once every N of them."""
    return math.ceil(train_images / world_size) // batch_size


def validation_batches(images: int, batch_size: int, world_size: int = 1) -> int:
    """Validation batches per process: timm's validation loader shards the images over the processes and keeps the
    last partial batch."""
    return math.ceil(math.ceil(images / world_size) / batch_size)


def _meta_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` whose parameters and buffers live on the meta device: same code, shapes and mode, no data
    copied, and nothing run on it reaches the model."""
    memo: Dict[int, torch.Tensor] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        meta = torch.empty_like(tensor, device='meta')
        memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
    return copy.deepcopy(model, memo)


class _NoModuleTracker:
    """Stands in for `FlopCounterMode`'s module tracker, attributing every FLOP to the total ("Global") alone: the
    tracker's backward hooks break ``torch.autograd.grad`` on a leaf input (pytorch/pytorch#131753), which is how
    every attack takes its input gradient."""

    parents = frozenset({'Global'})

    def __enter__(self) -> '_NoModuleTracker':
        return self

    def __exit__(self, *exc_info) -> None:
        return None


def flop_counter() -> FlopCounterMode:
    """torch's `FlopCounterMode` (no display) counting the total only, so that it can count attacks; read it with
    ``get_total_flops()`` after the ``with`` block."""
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _NoModuleTracker()
    return counter


def flops_per_pass(model: nn.Module, input_shape: Sequence[int]) -> float:
    """FLOPs of one training pass of `model` (forward in train mode and backward to the parameters) per image, at a
    batch of `input_shape` (rows, channels, height, width).

    Counted by `flop_counter` (matrix products and convolutions, two FLOPs a multiply-add) on a meta-device copy,
    so it costs no compute and changes neither weights, statistics nor gradients. Gradient checkpointing, when on,
    is counted: its backward runs the forward again.
    """
    probe = _meta_copy(model).train()
    with flop_counter() as counter:
        probe(torch.empty(tuple(input_shape), device='meta')).sum().backward()
    return counter.get_total_flops() / input_shape[0]


@dataclass(frozen=True)
class RunBudget:
    """A training run's cost: the papers' passes, FLOPs, and, once measured, time and memory.

    Attributes:
        method: The training method (``--method``).
        model: The model's name.
        device: The device type the step runs on (``cuda``, ``cpu``).
        world_size: Processes the run (or the projection) trains on, one device each.
        batch_size: Rows of a loader batch, per process (Fast AdvProp and NoFrost* scale ``--batch-size``).
        input_size: One image's shape, (channels, height, width).
        train_images: Images in the training split.
        epochs: Epochs of the run.
        passes_per_image: The method's cost model, forward+backward passes per training image.
        flops_per_pass: FLOPs of one forward+backward of the model per image (`flops_per_pass`).
        step_flops_per_image: FLOPs a real training step of the method counts, per loader image (counted with the
            attack cut short and extrapolated, `plan_budget`); None unless counted.
        pass_seconds: Seconds of one forward+backward pass of the model per image, measured on a loader batch; None
            unless measured.
        timed_passes: The passes that measurement timed (one per row of the batch).
        update_seconds: Seconds of one optimizer update, measured alone; None unless measured.
        step_seconds: Seconds of one training step, projected: passes per image × rows × `pass_seconds` +
            `update_seconds`; None unless measured.
        peak_memory_bytes: Peak memory of a real step with the attack cut to one iteration (see the module
            docstring); None unless measured.
        measured_epoch_seconds: Training seconds of each epoch a real run has finished so far.
        measured_peak_memory_bytes: Peak memory over those epochs; None before the first.
        validation_epoch_seconds: Projected wall time of one epoch's validation at most, from a clean batch and an
            attack iteration measured (`plan_validation`); None unless measured.
        validation: What that validation runs, in words (batches, branches, attack).
        validation_pass_seconds: Seconds of one pass of the model per image (a forward or a backward to the input) in
            the validation attack's iteration, measured; None unless measured.
        validation_timed_passes: The passes that measurement timed (a forward and a backward per row).
    """

    method: str
    model: str
    device: str
    world_size: int
    batch_size: int
    input_size: Tuple[int, int, int]
    train_images: int
    epochs: int
    passes_per_image: float
    flops_per_pass: float
    step_flops_per_image: Optional[float] = None
    pass_seconds: Optional[float] = None
    timed_passes: int = 0
    update_seconds: Optional[float] = None
    step_seconds: Optional[float] = None
    peak_memory_bytes: Optional[int] = None
    measured_epoch_seconds: Tuple[float, ...] = field(default_factory=tuple)
    measured_peak_memory_bytes: Optional[int] = None
    validation_epoch_seconds: Optional[float] = None
    validation: str = ''
    validation_pass_seconds: Optional[float] = None
    validation_timed_passes: int = 0

    @property
    def steps_per_epoch(self) -> int:
        """Training steps (loader batches) per epoch of each process (`steps_per_epoch`)."""
        return steps_per_epoch(self.train_images, self.batch_size, self.world_size)

    @property
    def images_per_epoch(self) -> int:
        """Images trained per epoch over all processes: whole batches only."""
        return self.steps_per_epoch * self.batch_size * self.world_size

    @property
    def passes_total(self) -> float:
        """Forward+backward passes of the whole run: passes per image × images per epoch × epochs."""
        return self.passes_per_image * self.images_per_epoch * self.epochs

    @property
    def flops_total(self) -> float:
        """FLOPs of the whole run in the papers' unit: its passes × FLOPs per pass."""
        return self.passes_total * self.flops_per_pass

    @property
    def projected_epoch_seconds(self) -> Optional[float]:
        """Projected wall time of an epoch: the projected step × steps per process (the processes step together;
        communication between them is not counted). The step includes an optimizer update, which gradient
        accumulation makes only every ``--grad-accum-steps`` steps: there the projection is slightly high. None
        without a measured step."""
        return None if self.step_seconds is None else self.step_seconds * self.steps_per_epoch

    @property
    def projected_run_seconds(self) -> Optional[float]:
        """Projected wall time of the run's training epochs (validation not included); None without a measured
        step."""
        epoch = self.projected_epoch_seconds
        return None if epoch is None else epoch * self.epochs

    @property
    def projected_validation_seconds(self) -> Optional[float]:
        """Projected wall time of the run's validations, one after each epoch, at most; None unless measured."""
        epoch = self.validation_epoch_seconds
        return None if epoch is None else epoch * self.epochs

    @property
    def projected_total_seconds(self) -> Optional[float]:
        """Projected wall time of the run's training and validation; None unless both were measured."""
        training, validation = self.projected_run_seconds, self.projected_validation_seconds
        return None if training is None or validation is None else training + validation

    def record_epoch(self, seconds: float, peak_bytes: int) -> 'RunBudget':
        """This budget with one more finished epoch of a real run: its training seconds and peak memory."""
        peak = max(peak_bytes, self.measured_peak_memory_bytes or 0)
        return replace(self, measured_epoch_seconds=(*self.measured_epoch_seconds, seconds),
                       measured_peak_memory_bytes=peak)

    def with_measured(self, record: Record, epochs: int) -> 'RunBudget':
        """This budget with the measured part of an earlier `to_dict` record of the same run (a resumed run), up to
        its first `epochs` epochs; the record keeps their mean time, which each of them is given."""
        count = min(int(record.get('measured_epochs') or 0), epochs)
        mean = record.get('measured_epoch_seconds')
        if not count or mean is None:
            return self
        return replace(self, measured_epoch_seconds=(float(mean),) * count,
                       measured_peak_memory_bytes=record.get('measured_peak_memory_bytes'))

    def to_dict(self) -> Record:
        """Flat record of plain values (for YAML, or a CSV row as ``summary.csv``): the fields, the derived totals and
        projections, and the measured epochs' count and mean time in place of their list."""
        record = asdict(self)
        measured = record.pop('measured_epoch_seconds')
        record['input_size'] = 'x'.join(str(n) for n in self.input_size)
        record.update(
            steps_per_epoch=self.steps_per_epoch, images_per_epoch=self.images_per_epoch,
            passes_total=self.passes_total, flops_total=self.flops_total,
            projected_epoch_seconds=self.projected_epoch_seconds, projected_run_seconds=self.projected_run_seconds,
            projected_validation_seconds=self.projected_validation_seconds,
            projected_total_seconds=self.projected_total_seconds,
            measured_epochs=len(measured), measured_epoch_seconds=sum(measured) / len(measured) if measured else None)
        return record

    def format(self, extra: Sequence[Tuple[str, str]] = ()) -> str:
        """The budget as a block of aligned lines, for the log or the terminal, with the `extra` ``(name, text)``
        lines last (what a plan states beside the budget: the decode check)."""
        size = 'x'.join(str(n) for n in self.input_size)
        lines = [
            (f'Budget of {self.method} on {self.model}', f'{self.world_size} process(es) on {self.device}, '
                                                         f'{self.batch_size} rows of {size} per step'),
            ('passes per image', f'{self.passes_per_image:g} (the cost model: forward+backward passes per image)'),
            ('images', f'{self.images_per_epoch:,} per epoch ({self.steps_per_epoch:,} steps per process) x '
                       f'{self.epochs} epochs'),
            ('passes', f'{self.passes_total:,.0f} forward+backward passes'),
            ('FLOPs per pass', f'{_si(self.flops_per_pass)}FLOP per image (one forward+backward at {size})'),
            ('FLOPs', f'{_si(self.flops_total)}FLOP (passes x FLOPs per pass)'),
        ]
        if self.step_flops_per_image is not None:
            ratio = self.step_flops_per_image / (self.passes_per_image * self.flops_per_pass)
            lines.append(('counted step', f'{_si(self.step_flops_per_image)}FLOP per image in a real step '
                                          f'({ratio:.2f} x the cost model; its attack counted at 1 and 2 iterations '
                                          f'and extrapolated)'))
        if self.step_seconds is not None:
            lines += [
                ('peak memory', f'{_megabytes(self.peak_memory_bytes)} (a real step with its attack cut to 1 '
                                f'iteration, which holds no more: {_PEAK_MEANING[self.device]})'),
                ('step time', f'{self.step_seconds:.3f} s ({self._step_projection()})'),
                ('epoch time', f'{duration_text(self.projected_epoch_seconds)} (projection, training)'),
            ]
        if self.validation_epoch_seconds is not None:
            lines.append(('validation', f'{duration_text(self.validation_epoch_seconds)} per epoch at most '
                                        f'(projection: {self.validation}{self._attack_projection()}; every image '
                                        f'attacked for all iterations)'))
        if self.step_seconds is not None:
            lines.append(('training time', f'{duration_text(self.projected_run_seconds)} (projection, {self.epochs} '
                                           f'epochs)'))
        if self.projected_total_seconds is not None:
            lines += [
                ('validation time', f'{duration_text(self.projected_validation_seconds)} (projection, {self.epochs} '
                                    f'validations)'),
                ('total time', f'{duration_text(self.projected_total_seconds)} (projection, training and validation)'),
            ]
        if self.measured_epoch_seconds:
            mean = sum(self.measured_epoch_seconds) / len(self.measured_epoch_seconds)
            lines += [
                ('measured epoch time', f'{duration_text(mean)} (mean of {len(self.measured_epoch_seconds)} epoch(s))'),
                ('measured peak memory', _megabytes(self.measured_peak_memory_bytes)),
            ]
        lines += extra
        width = max(len(name) for name, _ in lines[1:])
        head, *rest = lines
        return '\n'.join([f'{head[0]} ({head[1]})'] + [f'  {name:<{width}}  {text}' for name, text in rest])

    def _step_projection(self) -> str:
        """What the step time is projected from (once measured)."""
        if self.pass_seconds is None or self.update_seconds is None:
            return 'projection'
        return (f'projection from {self.timed_passes:,} measured forward+backward passes of the model on '
                f'{self.device}: {self.passes_per_image:g} passes x {self.batch_size} images x '
                f'{seconds_text(self.pass_seconds)} + {seconds_text(self.update_seconds)} optimizer update')

    def _attack_projection(self) -> str:
        """What the attacked batches' time is projected from (once measured)."""
        if self.validation_pass_seconds is None:
            return ''
        return (f'; attacked batches from {self.validation_timed_passes:,} measured passes of an attack iteration, '
                f'{seconds_text(self.validation_pass_seconds)} per pass')


# What the peak memory of each device type is.
_PEAK_MEANING = defaultdict(lambda: "the process's peak resident memory", cuda="the CUDA allocator's peak")


def _si(value: float) -> str:
    """`value` with an SI prefix and a trailing space (``'24.6 G'``), for FLOPs."""
    for power, prefix in ((18, 'E'), (15, 'P'), (12, 'T'), (9, 'G'), (6, 'M'), (3, 'k')):
        if abs(value) >= 10 ** power:
            return f'{value / 10 ** power:.3g} {prefix}'
    return f'{value:.3g} '


def _megabytes(value: Optional[int]) -> str:
    return 'n/a' if value is None else f'{value / 2 ** 20:,.0f} MB'


def count_budget(
        task: AdversarialClassificationTask,
        input_shape: Sequence[int],
        *,
        train_images: int,
        epochs: int,
        world_size: int = 1,
        model_name: str = '',
        device: Union[str, torch.device] = 'cpu',
) -> RunBudget:
    """The run's budget from counting alone: passes (the task's cost model) and FLOPs per pass. Runs no step and
    changes nothing, so a real run can record it before it trains.

    Args:
        task: The built task (its model is the one the run trains).
        input_shape: A loader batch's shape, (rows, channels, height, width).
        train_images: Images in the training split.
        epochs: Epochs of the run.
        world_size: Processes of the run.
        model_name: The model's name, for the record.
        device: The training device, for the record.
    """
    return RunBudget(
        method=task.method, model=model_name, device=torch.device(device).type, world_size=world_size,
        batch_size=int(input_shape[0]), input_size=tuple(int(n) for n in input_shape[1:]), train_images=train_images,
        epochs=epochs, passes_per_image=float(task.passes_per_image),
        flops_per_pass=flops_per_pass(task.attack_module(), input_shape))


def _counted_flops(work: Callable[[], object]) -> int:
    """FLOPs `work` computes, counted by `flop_counter`."""
    with flop_counter() as counter:
        work()
    return counter.get_total_flops()


def training_pass_seconds(model: nn.Module, input: torch.Tensor, amp_dtype: Optional[torch.dtype] = None,
                          repeat: int = 1) -> float:
    """Seconds of one training pass of `model` over the batch `input`, the papers' unit (`flops_per_pass`): forward in
    train mode and backward to the parameters (their gradients made anew, as a step makes them), timed after an
    untimed warm-up, the fastest of `repeat` calls (`timed_seconds`). The model trains its BN statistics on it.
    """
    model.train()

    def one_pass() -> None:
        model.zero_grad(set_to_none=True)
        with torch.autocast(input.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            output = model(input)
        output.float().sum().backward()  # any loss: the backward's cost does not depend on it

    return timed_seconds(one_pass, input.device, warmup=1, repeat=repeat)


def plan_budget(
        task: AdversarialClassificationTask,
        optimizer: torch.optim.Optimizer,
        batch: Tuple[torch.Tensor, torch.Tensor],
        *,
        train_images: int,
        epochs: int,
        world_size: int = 1,
        model_name: str = '',
        amp_dtype: Optional[torch.dtype] = None,
        clip_grad: Optional[float] = None,
        clip_mode: str = 'norm',
        channels_last: bool = False,
        loss_scaler: Optional[LossScaler] = None,
        repeat: int = 1,
) -> RunBudget:
    """The run's budget (`count_budget`) with its step measured on this device and projected to the run, the
    training attack never run for more than two iterations (a plan of PGD-100000 costs what one of PGD-2 does).

    * Time: one training pass of the model over `batch` (`training_pass_seconds`) and the optimizer's update alone
      are timed; a step is projected as the cost model's passes per image × the batch's rows × seconds per pass +
      the update. The cost model counts an attack iteration as a whole pass (it computes no parameter gradients),
      and clipping is not timed: for the attack-based methods the projection leans high.
    * Memory: the peak of a real step (the training loop's own, `train_one_epoch` on `batch`) with the attack cut to
      one iteration (`AdversarialClassificationTask.attack_steps_at_most`), after a warm-up step (kernels chosen,
      optimizer state made, an attack's one-time work done): each iteration frees its graph before the next, so
      more iterations hold no more memory.
    * FLOPs: counted (`flop_counter`) on real steps with the attack cut to one and to two iterations, and
      extrapolated to the attack's K: ``f(1) + (K - 1) * (f(2) - f(1))``, exact since every iteration computes the
      same.

    The task, its model and `optimizer` have trained on `batch` afterwards: plan in a run that stops here.

    Args:
        task: The built task, on its device, not wrapped for distributed training.
        optimizer: The run's optimizer over the task's parameters.
        batch: One loader batch (inputs and targets) on the training device.
        train_images: Images in the training split.
        epochs: Epochs of the run.
        world_size: Processes to project the run to, each on a device like this one.
        model_name: The model's name, for the record.
        amp_dtype, clip_grad, clip_mode, channels_last, loss_scaler: The run's, as `train_one_epoch` takes them.
        repeat: Timed calls of the pass and of the update, the fastest taken (`timed_seconds`): more for work too
            short to time once.
    """
    input, _ = batch
    device, rows = input.device, input.shape[0]
    budget = count_budget(task, input.shape, train_images=train_images, epochs=epochs, world_size=world_size,
                          model_name=model_name, device=device)

    def step() -> None:
        train_one_epoch(0, task, [batch], optimizer, device, amp_dtype=amp_dtype, clip_grad=clip_grad,
                        clip_mode=clip_mode, channels_last=channels_last, log_interval=0, loss_scaler=loss_scaler)

    iterations = task.attack_steps
    with task.attack_steps_at_most(1):
        step()
        synchronize(device)
        reset_peak_memory(device)
        step()
        synchronize(device)
        peak = peak_memory_bytes(device)
        flops = _counted_flops(step)
    if iterations > 1:
        with task.attack_steps_at_most(2):
            flops += (iterations - 1) * (_counted_flops(step) - flops)
    if channels_last:
        input = input.contiguous(memory_format=torch.channels_last)
    pass_seconds = training_pass_seconds(task.attack_module(), input, amp_dtype, repeat) / rows
    update_seconds = timed_seconds(optimizer.step, device, repeat=repeat)
    return replace(budget, step_flops_per_image=flops / rows, pass_seconds=pass_seconds, timed_passes=rows,
                   update_seconds=update_seconds,
                   step_seconds=budget.passes_per_image * rows * pass_seconds + update_seconds,
                   peak_memory_bytes=peak)


def attack_pass_seconds(model: nn.Module, attack: Attack, batch: Tuple[torch.Tensor, torch.Tensor],
                        repeat: int = 1) -> float:
    """Seconds of one pass of `model` per image in an iteration of `attack` on `batch`: a forward and a backward to
    the input, in the attack's own context (its BN mode, BN folded as it folds it, its autocast), timed after an
    untimed warm-up, the fastest of `repeat` calls; an iteration makes 2 passes per row."""
    input, target = batch

    def timed(net: nn.Module, x: torch.Tensor, y: torch.Tensor, targets: Optional[torch.Tensor]) -> float:
        goal = y if targets is None else targets
        return timed_seconds(lambda: input_gradient(net, x, goal, cross_entropy_per_sample, attack.autocast_dtype),
                             x.device, warmup=1, repeat=repeat)

    return attack.call_in_context(model, input, target, None, timed) / (2 * input.shape[0])


@torch.no_grad()
def plan_validation(
        budget: RunBudget,
        model: nn.Module,
        attack: Attack,
        clean_batch: Tuple[torch.Tensor, torch.Tensor],
        robust_batch: Tuple[torch.Tensor, torch.Tensor],
        *,
        batch_size: int,
        val_images: int,
        robust_images: int,
        branches: Sequence[str] = ('clean',),
        models: int = 1,
        amp_dtype: Optional[torch.dtype] = None,
        channels_last: bool = False,
        repeat: int = 1,
) -> RunBudget:
    """`budget` with the validation each epoch runs projected to the run from what it takes on this device, the
    validation attack never run (a plan of PGD-100000 costs what one of PGD-1 does).

    The clean batch is validated as the epoch loop validates it (`validate`, every branch), timed; an attacked batch
    is projected from one iteration of the attack on the robust batch (`attack_pass_seconds`): its K iterations and
    the score make K + 1 forwards and K backwards per image (as the evaluation's plan counts PGD), on each branch.
    An epoch's validation is their times × the batches of each per process (on the budget's ``world_size``
    processes), × the models validated (the EMA is validated like the model).

    The validation attack stops on each image at its first fooling iterate, so its cost grows as the model learns
    (an untrained model is fooled at once): the projection counts every image attacked for all the iterations, the
    cost of a model no image of which is fooled, an upper bound.

    Args:
        budget: The run's budget (`plan_budget`), on the same device.
        model: The model the run validates.
        attack: The robust validation's attack.
        clean_batch: A batch of the clean validation loader, on the device.
        robust_batch: A batch of the robust validation loader, on the device.
        batch_size: The validation loaders' batch size.
        val_images: Images of the clean validation (the validation split).
        robust_images: Images of the robust validation (``--num-samples`` of them, or the split).
        branches: The branches validated.
        models: Models validated each epoch: 2 with an EMA, else 1.
        amp_dtype, channels_last: The run's.
        repeat: Timed calls of each, the fastest taken (`timed_seconds`).
    """
    device = clean_batch[0].device
    clean = timed_seconds(lambda: validate(model, [clean_batch], device, attack, robust_loader=[], branches=branches,
                                           amp_dtype=amp_dtype, channels_last=channels_last), device, warmup=1,
                          repeat=repeat)
    input, target = robust_batch
    if channels_last:
        input = input.contiguous(memory_format=torch.channels_last)
    module = unwrap_model(model).eval()
    with route(module, branches[0]):
        pass_seconds = attack_pass_seconds(module, attack, (input, target), repeat)
    passes = 2 * getattr(attack, 'steps', 1) + 1
    attacked = len(branches) * passes * input.shape[0] * pass_seconds
    clean_batches = validation_batches(val_images, batch_size, budget.world_size)
    robust_batches = validation_batches(robust_images, batch_size, budget.world_size)
    per_epoch = models * (clean * clean_batches + attacked * robust_batches)
    what = (f'{clean_batches:,} clean + {robust_batches:,} attacked batches of {batch_size} per process, '
            f'{attack_label(attack)}, {len(branches)} branch(es)' + (', model and EMA' if models > 1 else ''))
    return replace(budget, validation_epoch_seconds=per_epoch, validation=what, validation_pass_seconds=pass_seconds,
                   validation_timed_passes=2 * input.shape[0])


def write_budget(path: Union[str, Path], budget: RunBudget) -> None:
    """Write `budget`'s record (`RunBudget.to_dict`) to the YAML file `path`, replacing it."""
    Path(path).write_text(yaml.safe_dump(budget.to_dict(), sort_keys=False))
