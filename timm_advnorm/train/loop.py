"""One training epoch and one validation pass, shared by every method (the loop never branches on the method)."""
import logging
import time
from collections import OrderedDict
from contextlib import nullcontext
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.utils import AverageMeter, dispatch_clip_grad, reduce_tensor
from timm.utils.model import unwrap_model

from ..attacks.base import Attack
from ..layers.routing import route
from ..task import AdversarialClassificationTask

__all__ = ['Validation', 'eval_metric_for', 'metric_names', 'train_one_epoch', 'validate', 'validation_message']

_logger = logging.getLogger(__name__)


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
) -> Dict[str, float]:
    """Train `task` for one epoch; returns the epoch's mean loss parts, learning rate and throughput.

    Args:
        before_forward: Called after ``model.train()``, e.g. to switch BN to running statistics.
    """
    task.train()
    if before_forward is not None:
        before_forward()
    meters: Dict[str, AverageMeter] = OrderedDict()
    num_batches = len(loader)
    num_updates = epoch * num_batches
    start = time.perf_counter()
    images = 0
    for batch_idx, (input, target) in enumerate(loader):
        input, target = input.to(device), target.to(device)
        if channels_last:
            input = input.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=True)
        with _autocast(device, amp_dtype):
            result = task(input, target)
        result['loss'].backward()
        task.finalize_gradients()
        if clip_grad is not None:
            dispatch_clip_grad(task.get_clip_parameters(exclude_head='agc' in clip_mode), value=clip_grad,
                               mode=clip_mode)
        optimizer.step()
        task.update_ema(step=num_updates)
        num_updates += 1
        images += input.shape[0]
        for key, value in _logged_losses(result).items():
            value = value.detach().float()
            if distributed:
                value = reduce_tensor(value, dist.get_world_size())
            meters.setdefault(key, AverageMeter()).update(value.item(), input.shape[0])
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates)
        if log_interval and (batch_idx % log_interval == 0 or batch_idx == num_batches - 1):
            parts = ' '.join(f'{k}: {m.avg:.4f}' for k, m in meters.items())
            _logger.info(f'Train: {epoch} [{batch_idx + 1}/{num_batches}] {parts} '
                         f'lr: {optimizer.param_groups[0]["lr"]:.3g}')
    elapsed = time.perf_counter() - start
    metrics = OrderedDict((k, m.avg) for k, m in meters.items())
    metrics['lr'] = optimizer.param_groups[0]['lr']
    metrics['images_per_sec'] = images / max(elapsed, 1e-9)
    metrics['passes_per_image'] = task.passes_per_image
    return metrics


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


def validation_message(metrics: Dict[str, float], robust_samples: int) -> str:
    """One log line of validation metrics, saying how many images the robust accuracies were measured on."""
    return ', '.join(f'{k}: {v:.2f}' for k, v in metrics.items()) + f' (robust top-1 on {robust_samples} images)'


def _count_correct(logits: torch.Tensor, target: torch.Tensor) -> float:
    return (logits.float().argmax(dim=1) == target).sum().item()


def _top1_correct(model: nn.Module, loader: Iterable, device: torch.device, amp_dtype, channels_last: bool,
                  attack: Optional[Attack] = None):
    """(correct, seen) of `model` on `loader`, on inputs perturbed by `attack` when given."""
    correct = seen = 0
    for input, target in loader:
        input, target = input.to(device), target.to(device)
        if channels_last:
            input = input.contiguous(memory_format=torch.channels_last)
        if attack is not None:
            with torch.enable_grad():
                input = attack(model, input, target)
        with _autocast(device, amp_dtype):
            correct += _count_correct(model(input), target)
        seen += target.shape[0]
    return correct, seen


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
) -> Validation:
    """Clean top-1 on `loader` and robust top-1 on `robust_loader` (default: `loader`) for each branch, in eval mode.

    Metric names (`metric_names`): ``top1``/``robust_top1`` for the clean branch, ``adv_branch_top1``/
    ``adv_branch_robust_top1`` for the adversarial branch of a mixture-BN model. The attacked images are counted
    over all ranks.
    """
    model = unwrap_model(model)
    model.eval()
    names = metric_names(branches)
    counts = []
    for branch in branches:
        with route(model, branch):
            counts.extend(_top1_correct(model, loader, device, amp_dtype, channels_last))
            counts.extend(_top1_correct(model, robust_loader or loader, device, amp_dtype, channels_last, attack))
    totals = torch.tensor(counts, dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(totals)
    totals = totals.tolist()
    metrics = OrderedDict(
        (name, 100.0 * totals[2 * i] / max(totals[2 * i + 1], 1.0)) for i, name in enumerate(names))
    return Validation(metrics, robust_samples=int(totals[3]))
