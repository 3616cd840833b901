"""``--grad-accum-steps``: updates group batches as timm's train.py does, each micro-batch runs its own attack, and
the accumulated update equals one big batch's wherever no row's loss depends on another (no batch statistics, no
random attack start): Madry on GroupNorm, the fused mixture-BN pass and Fast AdvProp's gradient reuse and per-group
rescaling on running statistics."""
import contextlib
from typing import Dict, List, Tuple

import pytest
import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.task import create_task, use_running_statistics
from timm_advnorm.train.accumulation import GradientAccumulation, average_gradients
from timm_advnorm.train.loop import train_one_epoch

NUM_CLASSES = 10
SPACE = InputSpace()
Batch = Tuple[torch.Tensor, torch.Tensor]


def _rows(n: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return SPACE.from_pixels(torch.rand(n, 3, 32, 32, generator=g)), torch.randint(0, NUM_CLASSES, (n,), generator=g)


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=NUM_CLASSES)


def _deterministic_pgd():
    """PGD-2 from the clean image: each row's attack depends on that row alone."""
    return create_attack('pgd', space=SPACE, eps=8.0, step=4.0, steps=2, targeted=False, random_start=False, seed=0)


def _update(task, batches: List[Batch], accum_steps: int, running_stats: bool) -> Dict[str, torch.Tensor]:
    """The change of every parameter after one epoch of plain SGD at lr 1 (minus the averaged gradient)."""
    model = task.trainable_module
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    train_one_epoch(0, task, batches, optimizer, torch.device('cpu'), log_interval=0, grad_accum_steps=accum_steps,
                    before_forward=(lambda: use_running_statistics(model)) if running_stats else None)
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}


def _assert_same_update(accumulated: Dict[str, torch.Tensor], big: Dict[str, torch.Tensor]) -> None:
    assert any(d.abs().sum() > 0 for d in big.values())
    for name in big:
        torch.testing.assert_close(accumulated[name], big[name], rtol=1e-4, atol=1e-6, msg=name)


def test_madry_on_group_norm_accumulates_to_the_big_batch_update():
    x, y = _rows(8)
    big = _update(create_task('madry', _model('test_gn_resnet'), attack=_deterministic_pgd()), [(x, y)], 1, False)
    micro = [(x[:4], y[:4]), (x[4:], y[4:])]
    accumulated = _update(create_task('madry', _model('test_gn_resnet'), attack=_deterministic_pgd()), micro, 2,
                          False)
    _assert_same_update(accumulated, big)


def test_the_fused_mixture_bn_pass_accumulates_to_the_big_batch_update_on_running_statistics():
    x, y = _rows(8)
    big = _update(create_task('mbn', _model('test_mbn_resnet'), attack=_deterministic_pgd()), [(x, y)], 1, True)
    micro = [(x[:4], y[:4]), (x[4:], y[4:])]
    accumulated = _update(create_task('mbn', _model('test_mbn_resnet'), attack=_deterministic_pgd()), micro, 2, True)
    _assert_same_update(accumulated, big)


def _fast_advprop():
    task = create_task('fast_advprop', _model('test_mbn_resnet'), space=SPACE, eps=4.0, steps=2)
    task._random_start = lambda x, generator: torch.zeros_like(x)  # each row's attack then depends on it alone
    return task


def test_fast_advprop_gradient_reuse_and_rescaling_accumulate_to_the_big_batch_update():
    """Two micro-batches of 4 clean + 1 attacked rows against one batch of their 8 clean + 2 attacked rows (clean
    rows first, as Fast AdvProp splits a batch): the same importance shares, so the same update."""
    x, y = _rows(10)
    clean, attacked = (x[:8], y[:8]), (x[8:], y[8:])
    big_batch = (torch.cat([clean[0], attacked[0]]), torch.cat([clean[1], attacked[1]]))
    micro = [(torch.cat([clean[0][i * 4:(i + 1) * 4], attacked[0][i:i + 1]]),
              torch.cat([clean[1][i * 4:(i + 1) * 4], attacked[1][i:i + 1]])) for i in range(2)]
    big = _update(_fast_advprop(), [big_batch], 1, True)
    task = _fast_advprop()
    accumulated = _update(task, micro, 2, True)
    assert task.step_count == 2  # its attack ran once per micro-batch
    _assert_same_update(accumulated, big)


def test_batch_statistics_make_micro_batches_differ_from_one_big_batch():
    """The documented limit: BN in training mode normalizes each micro-batch with its own statistics."""
    x, y = _rows(8)
    big = _update(create_task('madry', _model('test_resnet'), attack=_deterministic_pgd()), [(x, y)], 1, False)
    micro = [(x[:4], y[:4]), (x[4:], y[4:])]
    accumulated = _update(create_task('madry', _model('test_resnet'), attack=_deterministic_pgd()), micro, 2, False)
    assert any(not torch.allclose(accumulated[n], big[n], rtol=1e-4, atol=1e-6) for n in big)


class _Attacks:
    """Counts the rows each attack call receives."""

    def __init__(self, attack):
        self.attack, self.rows = attack, []
        self.targeted = attack.targeted

    def __call__(self, model, input, target):
        self.rows.append(input.shape[0])
        return self.attack(model, input, target)


class _Schedule:
    def __init__(self):
        self.updates = []

    def step_update(self, num_updates, metric=None):
        self.updates.append(num_updates)


def test_updates_group_batches_as_timm_and_attacks_run_per_micro_batch(monkeypatch):
    """Five batches at --grad-accum-steps 2: updates after batches 2, 4 and 5, the last one of a single micro-batch;
    the schedule counts updates from the epoch's first (epoch x updates per epoch); every micro-batch but the last of
    each update runs without DDP's gradient all-reduce."""
    task = create_task('madry', _model('test_resnet'), attack=_Attacks(_deterministic_pgd()))
    steps, syncs_skipped = [], []
    optimizer = torch.optim.SGD(task.trainable_module.parameters(), lr=0.01)
    monkeypatch.setattr(optimizer, 'step', lambda: steps.append(True))

    @contextlib.contextmanager
    def no_sync():
        syncs_skipped.append(True)
        yield

    monkeypatch.setattr(task, 'no_sync', no_sync)
    schedule = _Schedule()
    batches = [_rows(3, seed=i) for i in range(5)]
    metrics = train_one_epoch(1, task, batches, optimizer, torch.device('cpu'), lr_scheduler=schedule, log_interval=0,
                              grad_accum_steps=2)
    assert task.attack.rows == [3] * 5
    assert len(steps) == 3 and schedule.updates == [4, 5, 6]
    assert len(syncs_skipped) == 2
    assert metrics['images_per_sec'] > 0


def test_grouping_matches_timm_train_one_epoch():
    """timm's train_one_epoch, transcribed: an update after every N batches and after the last; the last update
    divides by what is left."""
    for num_batches in range(1, 12):
        for steps in range(1, 5):
            plan = GradientAccumulation(num_batches, steps)
            last_accum_steps = num_batches % steps
            last_batch_idx_to_accum = num_batches - last_accum_steps
            assert plan.updates_per_epoch == (num_batches + steps - 1) // steps
            for batch_idx in range(num_batches):
                need_update = batch_idx == num_batches - 1 or (batch_idx + 1) % steps == 0
                divisor = last_accum_steps if batch_idx >= last_batch_idx_to_accum else steps
                assert plan.closes_update(batch_idx) == need_update
                assert plan.micro_batches(batch_idx) == divisor
                assert plan.update_index(batch_idx) == batch_idx // steps


def test_average_gradients_divides_what_was_accumulated():
    layer = nn.Linear(3, 2)
    for _ in range(3):
        layer(torch.ones(1, 3)).sum().backward()
    average_gradients(layer.parameters(), 3)
    torch.testing.assert_close(layer.bias.grad, torch.ones(2))


def test_steps_below_one_are_a_value_error():
    with pytest.raises(ValueError, match='--grad-accum-steps'):
        GradientAccumulation(10, 0)
