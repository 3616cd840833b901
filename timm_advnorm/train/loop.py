"""One training epoch and one validation pass, shared by every method (the loop never branches on the method), and
the divergence guard: no optimizer step on a non-finite loss or gradient, no checkpoint of non-finite state."""
import copy
import logging
import math
import time
from collections import OrderedDict
from contextlib import nullcontext
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.utils import AverageMeter, dispatch_clip_grad, reduce_tensor
from timm.utils.model import unwrap_model

from ..attacks import AttackProgress
from ..attacks.base import Attack
from ..layers.routing import route
from ..messages import some_names
from ..progress import progress_bar
from ..signals import check_interrupted
from ..task import AdversarialClassificationTask
from .accumulation import GradientAccumulation, average_gradients

__all__ = ['DivergenceError', 'LossScaler', 'NonFiniteGuard', 'Validation', 'check_finite_state', 'eval_metric_for',
           'metric_names', 'train_one_epoch', 'validate']

_logger = logging.getLogger(__name__)

#: What a diverged run can change, said with every divergence error.
_DIVERGENCE_HINT = 'lower --lr, clip gradients (--clip-grad) or skip such steps (--skip-nonfinite N)'


class DivergenceError(ValueError):
    """Training produced a non-finite loss, gradient or weight; the run stops before anything non-finite is saved.

    A ValueError, so the commands report it as one line with exit status 2: the remedy is in the user's hands (a lower
    learning rate, clipping), and the checkpoints already written hold the last finite weights.
    """


class NonFiniteGuard:
    """What a training step with a non-finite loss or gradient (or, when skipping, BN statistics) does: by default
    the run stops at the first; with `max_skips` the step is skipped (no optimizer step, BN statistics and EMA
    untouched, a warning logged) up to `max_skips` times over the run, and the next one stops it.

    Args:
        max_skips: Non-finite steps to skip before stopping (``--skip-nonfinite``).
    """

    def __init__(self, max_skips: int = 0):
        self.max_skips = max_skips
        self.skipped = 0

    def skip(self, problem: str) -> None:
        """Count the step `problem` describes as skipped, or raise when the budget of skips is spent.

        Raises:
            DivergenceError: The step is over the budget.
        """
        if self.skipped >= self.max_skips:
            skipped = f' after skipping {self.skipped} such step(s) (--skip-nonfinite {self.max_skips})' \
                if self.max_skips else ''
            raise DivergenceError(f'training diverged: {problem}{skipped}; {_DIVERGENCE_HINT}')
        self.skipped += 1
        _logger.warning('Skipped a training step (%d of at most %d, --skip-nonfinite): %s.', self.skipped,
                        self.max_skips, problem)


class LossScaler(torch.amp.GradScaler):
    """torch's loss scaler for float16 training, under the key timm's checkpoints keep it by (``amp_scaler``): timm's
    `CheckpointSaver` saves it and `resume_task_checkpoint` restores it (its scale and growth tracker)."""

    state_dict_key = 'amp_scaler'


def _autocast(device: torch.device, dtype: Optional[torch.dtype]):
    if dtype is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def train_one_epoch(
        epoch: int,
        task: AdversarialClassificationTask,
        loader: Iterable,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        lr_scheduler=None,
        amp_dtype: Optional[torch.dtype] = None,
        clip_grad: Optional[float] = None,
        clip_mode: str = 'norm',
        channels_last: bool = False,
        before_forward: Optional[Callable[[], None]] = None,
        log_interval: int = 50,
        distributed: bool = False,
        guard: Optional[NonFiniteGuard] = None,
        progress: bool = False,
        loss_scaler: Optional[LossScaler] = None,
        grad_accum_steps: int = 1,
        recovery: Optional[Callable[[int], None]] = None,
        recovery_interval: int = 0,
        updates_done: int = 0,
) -> Dict[str, float]:
    """Train `task` for one epoch; returns the epoch's mean loss parts, learning rate and throughput.

    Every step checks its loss parts and gradient norm for finiteness before the optimizer step, in one
    synchronization with the device (the values are logged from the same transfer); `guard` says what a non-finite
    step does (default: stop with `DivergenceError`).

    Args:
        before_forward: Called after ``model.train()``, e.g. to switch BN to running statistics.
        guard: Non-finite step policy, shared by the epochs of a run (it counts the skipped steps).
        progress: Show a progress bar over the batches, with the running loss and images per second (for a person
            watching a terminal; see `timm_advnorm.usage.show_progress`).
        loss_scaler: float16 training: the loss is scaled before the backward and the gradients unscaled before
            clipping; a step whose gradients overflowed is skipped and the scale lowered, as timm does (an overflow is
            the scaler's business, not a divergence: only a non-finite loss is).
        grad_accum_steps: Batches whose gradients make one optimizer update (see `accumulation`): each batch runs
            the method's whole step up to its backward pass, attack included; every batch but an update's last runs
            without DDP's gradient all-reduce, and the schedule counts updates, not batches.
        recovery: Called with the index of the update just made to write a recovery checkpoint, every
            `recovery_interval` updates (timm's ``--recovery-interval``; 0: never).
        updates_done: Updates of the epoch already made (a run resumed from a recovery checkpoint): the epoch makes
            the rest, on as many batches of the loader's new order as they take, and its metrics cover them only.

    Raises:
        DivergenceError: A non-finite step the guard does not skip; the optimizer has not stepped on it.
    """
    guard = guard or NonFiniteGuard()
    task.train()
    if before_forward is not None:
        before_forward()
    meters: Dict[str, AverageMeter] = OrderedDict()
    num_batches = len(loader)
    accumulation = GradientAccumulation(num_batches, grad_accum_steps)
    num_updates = epoch * accumulation.updates_per_epoch + updates_done
    start = time.perf_counter()
    images = 0
    first_batch = updates_done * grad_accum_steps
    batches = zip(range(first_batch, num_batches), loader)
    with progress_bar(batches, show=progress, total=num_batches - first_batch, desc=f'train {epoch}', unit='batch',
                      leave=False) as bar:
        for batch_idx, (input, target) in bar:
            check_interrupted()
            input, target = input.to(device), target.to(device)
            if channels_last:
                input = input.contiguous(memory_format=torch.channels_last)
            if accumulation.opens_update(batch_idx):
                buffers = _snapshot_buffers(task) if guard.max_skips else None
                optimizer.zero_grad(set_to_none=True)
                update_losses: List[Dict[str, torch.Tensor]] = []
                update_images = 0
            closes = accumulation.closes_update(batch_idx)
            with nullcontext() if closes else task.no_sync():  # DDP all-reduces the gradients once per update
                with _autocast(device, amp_dtype):
                    result = task(input, target)
                if loss_scaler is None:
                    result['loss'].backward()
                else:
                    loss_scaler.scale(result['loss']).backward()
            update_losses.append({k: v.detach() for k, v in _logged_losses(result).items()})
            update_images += input.shape[0]
            if not closes:
                continue
            if loss_scaler is not None:
                loss_scaler.unscale_(optimizer)
            average_gradients(task.trainable_module.parameters(), len(update_losses))
            task.finalize_gradients()
            grad_norm = _clip_and_measure(task, clip_grad, clip_mode)
            losses, grad_norm = _step_values(_mean_losses(update_losses), grad_norm, distributed)
            problem = _nonfinite_problem(losses if loss_scaler is not None else {**losses, 'grad_norm': grad_norm})
            if problem is None and buffers is not None:
                problem = _nonfinite_buffers(task, distributed)
            for key, value in losses.items():
                meter = meters.setdefault(key, AverageMeter())
                if problem is None:
                    meter.update(value, update_images)
            if problem is not None:
                guard.skip(f'{problem} at epoch {epoch}, batch {batch_idx + 1}/{num_batches} '
                           f'(lr {optimizer.param_groups[0]["lr"]:.3g})')
                _restore_buffers(task, buffers)
            elif loss_scaler is None:
                optimizer.step()
            else:
                loss_scaler.step(optimizer)  # no step when the scaled gradients overflowed
            if loss_scaler is not None:
                loss_scaler.update()  # after every unscale_: lowers the scale after an overflow
            if problem is None and math.isfinite(grad_norm):
                task.update_ema(step=num_updates)
                images += update_images
            num_updates += 1
            if lr_scheduler is not None:
                lr_scheduler.step_update(num_updates=num_updates)
            update_idx = accumulation.update_index(batch_idx)
            if recovery is not None and recovery_interval and (update_idx + 1) % recovery_interval == 0:
                recovery(update_idx)
            if progress and 'loss' in meters:
                bar.set_postfix(loss=f'{meters["loss"].avg:.4f}',
                                img_s=f'{images / (time.perf_counter() - start):.1f}')
            if log_interval and (update_idx % log_interval == 0 or batch_idx == num_batches - 1):
                parts = ' '.join(f'{k}: {m.avg:.4f}' for k, m in meters.items())
                _logger.info(f'Train: {epoch} [{batch_idx + 1}/{num_batches}] {parts} '
                             f'lr: {optimizer.param_groups[0]["lr"]:.3g}')
    elapsed = time.perf_counter() - start
    # an epoch whose steps were all skipped has no loss to report: NaN, not the meters' initial 0
    metrics = OrderedDict((k, m.avg if m.count else float('nan')) for k, m in meters.items())
    metrics['lr'] = optimizer.param_groups[0]['lr']
    metrics['images_per_sec'] = images / max(elapsed, 1e-9)
    metrics['passes_per_image'] = task.passes_per_image
    return metrics


def _grad_norm(parameters: Iterable[nn.Parameter]) -> torch.Tensor:
    """The 2-norm of all gradients together, as a tensor (no synchronization): one fused kernel per device and
    dtype, as `torch.nn.utils.clip_grad_norm_` computes it."""
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def _clip_and_measure(task: AdversarialClassificationTask, clip_grad: Optional[float], clip_mode: str) -> torch.Tensor:
    """Clip the gradients as asked; returns their norm before clipping (a clipped NaN or Inf could look finite).

    Clipping by norm computes that norm anyway: it is reused rather than computed twice.
    """
    if clip_grad is not None and clip_mode == 'norm':
        return torch.nn.utils.clip_grad_norm_(task.get_clip_parameters(), clip_grad)
    norm = _grad_norm(task.get_clip_parameters())
    if clip_grad is not None:
        dispatch_clip_grad(task.get_clip_parameters(exclude_head='agc' in clip_mode), value=clip_grad, mode=clip_mode)
    return norm


def _step_values(losses: Dict[str, torch.Tensor], grad_norm: torch.Tensor,
                 distributed: bool) -> Tuple[Dict[str, float], float]:
    """The step's loss parts (averaged over ranks) and gradient norm as numbers, in one transfer from the device.

    Averaging over ranks spreads a non-finite value of any rank to all of them, so every rank takes the same
    decision about the step.
    """
    stacked = torch.stack([value.detach().float() for value in losses.values()] + [grad_norm.detach().float()])
    if distributed:
        stacked = reduce_tensor(stacked, dist.get_world_size())
    *values, norm = stacked.tolist()
    return dict(zip(losses, values)), norm


def _nonfinite_problem(values: Dict[str, float]) -> Optional[str]:
    """What is not finite among a step's values, in words (``non-finite loss (nan), grad_norm (inf)``); None if all
    are finite."""
    bad = [f'{name} ({value})' for name, value in values.items() if not math.isfinite(value)]
    return f'non-finite {", ".join(bad)}' if bad else None


def _nonfinite_buffers(task: AdversarialClassificationTask, distributed: bool = False) -> Optional[str]:
    """The model's non-finite buffers after a step's forwards, in words, on any process; None if all are finite.

    BN running statistics can overflow while the loss stays finite (the normalization hides the activations' size):
    such a step must be skipped too, or its statistics reach the checkpoint.
    """
    named = [(name, buffer) for name, buffer in unwrap_model(task.trainable_module).named_buffers()
             if buffer.is_floating_point()]
    where = _nonfinite_names(named, 'buffers', distributed) if named else None
    return None if where is None else f'non-finite {where}'


def _nonfinite_names(named: List[Tuple[str, torch.Tensor]], what: str, distributed: bool) -> Optional[str]:
    """Up to three names of the non-finite tensors of `named` (``a, b, c and 4 more``; with none here but some on
    another process, that process's `what`); None when every tensor on every process is finite."""
    device = named[0][1].device
    finite = torch.stack([torch.isfinite(tensor).all().to(device) for _, tensor in named])
    bad = (~finite).sum()
    if distributed:
        dist.all_reduce(bad)
    if not bad.item():
        return None
    local = [name for (name, _), ok in zip(named, finite.tolist()) if not ok]
    if not local:
        return f'{what} of another process'
    return some_names(local)


def _snapshot_buffers(task: AdversarialClassificationTask) -> List[torch.Tensor]:
    """Copies of the model's buffers (BN running statistics and counters) before a step that may be skipped: the
    forward of a non-finite step has already folded its activations into them."""
    return [buffer.clone() for buffer in unwrap_model(task.trainable_module).buffers()]


def _restore_buffers(task: AdversarialClassificationTask, saved: List[torch.Tensor]) -> None:
    """Put back the buffers `_snapshot_buffers` copied."""
    with torch.no_grad():
        for buffer, value in zip(unwrap_model(task.trainable_module).buffers(), saved):
            buffer.copy_(value)


def _named_tensors(state: Any, prefix: str = '') -> Iterator[Tuple[str, torch.Tensor]]:
    """The floating-point tensors of a checkpoint's state (nested dicts and lists), named by their path."""
    if torch.is_tensor(state):
        if state.is_floating_point() or state.is_complex():
            yield prefix, state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from _named_tensors(value, f'{prefix}.{key}' if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            yield from _named_tensors(value, f'{prefix}.{index}')


def check_finite_state(task: AdversarialClassificationTask, optimizer: torch.optim.Optimizer, epoch: int,
                       distributed: bool = False) -> None:
    """Check that what a checkpoint would hold (weights and buffers of the model and its EMA, the optimizer state)
    is finite, before it is validated and saved.

    Finite steps can still end in non-finite weights (an update that overflows); a checkpoint of them would be
    ranked like any other and resumed into NaN. Once per epoch, so the per-tensor checks cost nothing noticeable.

    Raises:
        DivergenceError: Some tensor, on some rank, is not finite.
    """
    state = {**task.get_checkpoint_state(), **task.get_checkpoint_state(ema=True), 'optimizer': optimizer.state_dict()}
    where = _nonfinite_names(list(_named_tensors(state)), 'tensors', distributed)
    if where is not None:
        raise DivergenceError(f'training diverged: non-finite {where} after epoch {epoch}; {_DIVERGENCE_HINT}')


def _mean_losses(micro_batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """The loss parts of an update: their mean over its micro-batches (one big batch's, for equal micro-batches)."""
    if len(micro_batches) == 1:
        return micro_batches[0]
    return {key: torch.stack([parts[key] for parts in micro_batches]).mean() for key in micro_batches[0]}


def _logged_losses(result: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The loss parts of a task's result; ``loss`` is the whole objective (``loss_total`` when the task reports one,
    as Fast AdvProp does because part of its loss is back-propagated inside the task). A task leaves out a part that
    is its whole loss, so nothing is logged twice."""
    parts = {name: value for name, value in result.items() if name.startswith('loss_') and name != 'loss_total'}
    return {'loss': result.get('loss_total', result['loss']), **parts}


# Metric names carry the branch they measure: none for the clean (inference) branch of every model.
_BRANCH_PREFIXES = {'clean': '', 'adv': 'adv_branch_'}


def metric_names(branches: Sequence[str], ema: bool = False) -> List[str]:
    """Names of the metrics `validate` reports for `branches` (with ``ema_`` twins when an EMA is validated too)."""
    names = [_BRANCH_PREFIXES[b] + m for b in branches for m in ('top1', 'robust_top1')]
    return names + [f'ema_{n}' for n in names] if ema else names


def eval_metric_for(task: AdversarialClassificationTask) -> str:
    """The metric ranking `task`'s checkpoints when the user names none: the task's `default_eval_metric`, or, when
    that names a branch the task does not validate (a model without mixture BN), the same accuracy of the clean
    branch."""
    metric = task.default_eval_metric
    if metric in metric_names(task.validated_branches):
        return metric
    return metric.removeprefix(_BRANCH_PREFIXES['adv'])


class Validation(NamedTuple):
    """One validation pass: accuracies in percent by metric name (what ranks and summarizes a run), and the number
    of attacked images behind the robust ones (a count, reported beside the metrics rather than among them)."""
    metrics: Dict[str, float]
    robust_samples: int


def _count_correct(logits: torch.Tensor, target: torch.Tensor) -> float:
    return (logits.float().argmax(dim=1) == target).sum().item()


def _top1_correct(model: nn.Module, loader: Iterable, device: torch.device, amp_dtype, channels_last: bool,
                  attack: Optional[Attack] = None, on_batch: Callable[[], None] = lambda: None):
    """(correct, seen) of `model` on `loader`, on inputs perturbed by `attack` when given; `on_batch` is called after
    each batch."""
    correct = seen = 0
    for input, target in loader:
        check_interrupted()
        input, target = input.to(device), target.to(device)
        if channels_last:
            input = input.contiguous(memory_format=torch.channels_last)
        if attack is not None:
            with torch.enable_grad():
                input = attack(model, input, target)
        with _autocast(device, amp_dtype):
            correct += _count_correct(model(input), target)
        seen += target.shape[0]
        on_batch()
    return correct, seen


class _AttackTicks:
    """Advances a validation bar through an attacked batch: one pass per iteration the attack reports done
    (`AttackProgress`), with where it is in the bar's postfix, and the batch's remaining passes once it is scored, so
    that a long attack moves the bar instead of holding it for the whole batch.

    Args:
        bar: The validation bar (a disabled one ignores it all).
        passes: Passes of an attacked batch (`_attacked_batch_passes`).
        what: The bar's postfix while the attacked batches run (``attacked (adv branch)``).
    """

    def __init__(self, bar: Any, passes: int, what: str):
        self.bar, self.passes, self.what = bar, passes, what
        self.done = 0

    def __call__(self, event: AttackProgress) -> None:
        if event.done > self.done:
            self.bar.update(event.done - self.done)
            self.done = event.done
        self.bar.set_postfix_str(f'{self.what} | {event.text()}', refresh=False)  # drawn with the next update

    def batch_done(self) -> None:
        """The batch is scored: the bar gets the passes its attack did not report (the final forward, the
        iterations an attack that stopped early did not run)."""
        self.bar.update(self.passes - self.done)
        self.done = 0


def _reporting_to(attack: Attack, ticks: _AttackTicks) -> Attack:
    """A copy of `attack` (options and random stream shared) that reports its progress to `ticks`; the run's own
    attack is left as it is."""
    attack = copy.copy(attack)
    attack.progress = ticks
    return attack


def _attacked_batch_passes(attack: Attack) -> int:
    """Passes of the model over an attacked batch, in units of a clean batch's forward: the attack's iterations (a
    forward and an input-gradient backward each) and the final forward; what the validation bar counts."""
    return getattr(attack, 'steps', 1) + 1


@torch.no_grad()
def validate(
        model: nn.Module,
        loader: Iterable,
        device: torch.device,
        attack: Attack,
        robust_loader: Optional[Iterable] = None,
        branches: Sequence[str] = ('clean',),
        amp_dtype: Optional[torch.dtype] = None,
        channels_last: bool = False,
        distributed: bool = False,
        progress: bool = False,
        desc: str = 'validate',
) -> Validation:
    """Clean top-1 on `loader` and robust top-1 on `robust_loader` (default: `loader`) for each branch, in eval mode.

    Metric names (`metric_names`): ``top1``/``robust_top1`` for the clean branch, ``adv_branch_top1``/
    ``adv_branch_robust_top1`` for the adversarial branch of a mixture-BN model. The attacked images are counted
    over all ranks.

    Args:
        progress: Show a progress bar (titled `desc`) with an ETA over the whole validation, counted in model passes
            over a batch: one per clean batch, the attack's iterations + 1 per attacked one, so that the rate the ETA
            comes from holds, roughly, across both. The attack reports each iteration to it (`_AttackTicks`): a long
            attack advances the bar within its batch and shows where it is.
    """
    model = unwrap_model(model)
    model.eval()
    robust_loader = loader if robust_loader is None else robust_loader
    names = metric_names(branches)
    counts = []
    attacked_passes = _attacked_batch_passes(attack)
    total = len(branches) * (len(loader) + attacked_passes * len(robust_loader))
    with progress_bar(show=progress, total=total, desc=desc, unit='pass', leave=False) as bar:
        for branch in branches:
            which = f' ({branch} branch)' if len(branches) > 1 else ''
            with route(model, branch):
                bar.set_postfix_str('clean' + which)
                counts.extend(_top1_correct(model, loader, device, amp_dtype, channels_last,
                                            on_batch=lambda: bar.update(1)))
                bar.set_postfix_str('attacked' + which)
                ticks = _AttackTicks(bar, attacked_passes, 'attacked' + which)
                counts.extend(_top1_correct(model, robust_loader, device, amp_dtype, channels_last,
                                            _reporting_to(attack, ticks) if progress else attack,
                                            on_batch=ticks.batch_done))
    totals = torch.tensor(counts, dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(totals)
    totals = totals.tolist()
    metrics = OrderedDict(
        (name, 100.0 * totals[2 * i] / max(totals[2 * i + 1], 1.0)) for i, name in enumerate(names))
    return Validation(metrics, robust_samples=int(totals[3]))
