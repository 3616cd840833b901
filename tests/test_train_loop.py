"""The training epoch and per-epoch validation: what they log, which branches they validate, what ranks checkpoints,
and what a non-finite step does."""
import pytest
import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.task import TASKS, VanillaTask, create_task
from timm_advnorm.train.loop import (DivergenceError, NonFiniteGuard, check_finite_state, eval_metric_for,
                                     metric_names, train_one_epoch, validate)

NUM_CLASSES = 10
SPACE = InputSpace()


def _model(name: str = 'test_mbn_resnet') -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=NUM_CLASSES)


def _attack(steps: int = 1):
    return create_attack('pgd', space=SPACE, eps=8.0, step=4.0, steps=steps, targeted=False, seed=0)


def _loader(images: int, batch_size: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = SPACE.from_pixels(torch.rand(images, 3, 32, 32, generator=g))
    y = torch.randint(0, NUM_CLASSES, (images,), generator=g)
    return list(zip(x.split(batch_size), y.split(batch_size)))


def _task(method: str, model: nn.Module):
    if method == 'fast_advprop':
        return create_task(method, model, space=SPACE, eps=1.0)
    if method == 'nofrost_star':
        from timm_advnorm.augment.deepaugment import DeepAugment
        return create_task(method, model, attack=_attack(), space=SPACE,
                           deepaugment=DeepAugment('cae', seed=0, allow_random_weights=True))
    return create_task(method, model, attack=_attack())


@pytest.mark.parametrize('method', sorted(TASKS))
def test_validation_reports_the_metrics_the_task_names_and_ranks_by_one_of_them(method):
    """What `validate` returns for the task's branches is exactly `metric_names`, which holds the default ranking
    metric; the image count is reported beside the accuracies, never among them."""
    task = _task(method, _model('test_nfr_resnet' if method.startswith('nofrost') else 'test_mbn_resnet'))
    branches = task.validated_branches
    result = validate(task.get_eval_model(), _loader(8), torch.device('cpu'), _attack(),
                      robust_loader=_loader(6, seed=1), branches=branches)
    assert list(result.metrics) == metric_names(branches)
    assert all(0.0 <= v <= 100.0 for v in result.metrics.values())
    assert result.robust_samples == 6
    assert eval_metric_for(task) in result.metrics
    assert not any('samples' in name for name in metric_names(branches, ema=True))


def test_a_single_route_method_on_a_mixture_bn_model_neither_validates_nor_ranks_by_the_adversarial_branch():
    task = _task('vanilla', _model())
    names = metric_names(task.validated_branches, ema=True)
    assert names == ['top1', 'robust_top1', 'ema_top1', 'ema_robust_top1']
    assert eval_metric_for(task) == 'top1'
    assert eval_metric_for(_task('madry', _model())) == 'robust_top1'
    assert eval_metric_for(_task('mbn', _model())) == 'adv_branch_robust_top1'
    assert eval_metric_for(_task('fast_advprop', _model())) == 'top1'


class _BothBranches(VanillaTask):
    """A method that would train both branches and rank by the adversarial one, for the fallback."""

    trained_branches = ('clean', 'adv')
    default_eval_metric = 'adv_branch_robust_top1'


def test_the_default_metric_of_a_missing_branch_falls_back_to_the_clean_branch():
    assert eval_metric_for(_BothBranches(_model())) == 'adv_branch_robust_top1'
    plain = _BothBranches(_model('test_resnet'))
    assert plain.validated_branches == ('clean',)
    assert eval_metric_for(plain) == 'robust_top1'


@pytest.mark.parametrize('method, losses', [
    ('vanilla', ['loss']), ('madry', ['loss']), ('mbn', ['loss', 'loss_clean', 'loss_adv'])])
def test_an_epoch_logs_each_loss_once(method, losses):
    """Vanilla's clean loss and Madry's adversarial loss are their whole loss: one ``loss`` column, not two equal."""
    model = _model()
    task = _task(method, model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    metrics = train_one_epoch(0, task, _loader(10), optimizer, torch.device('cpu'), log_interval=0)
    assert [k for k in metrics if k.startswith('loss')] == losses
    assert metrics['passes_per_image'] == task.passes_per_image


def _nan_batches(loader, bad):
    """`loader` with the images of the batches numbered in `bad` made NaN (as a corrupt batch, or a diverged
    forward: the loss, the gradients and the BN statistics of that forward are all NaN)."""
    return [(torch.full_like(x, float('nan')) if i in bad else x, y) for i, (x, y) in enumerate(loader)]


def _sgd_vanilla():
    model = _model()
    return model, _task('vanilla', model), torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def test_a_nonfinite_loss_stops_the_epoch_before_the_optimizer_steps():
    model, task, optimizer = _sgd_vanilla()
    before = {k: v.clone() for k, v in model.named_parameters()}
    with pytest.raises(DivergenceError, match=r'non-finite loss \(nan\).*at epoch 0, batch 1/2'):
        train_one_epoch(0, task, _nan_batches(_loader(10), {0}), optimizer, torch.device('cpu'), log_interval=0)
    assert all(torch.equal(before[k], v) for k, v in model.named_parameters()), 'the optimizer stepped on NaN'
    assert not optimizer.state, 'no momentum may hold a NaN step'


def test_a_nonfinite_gradient_of_a_finite_loss_stops_the_epoch():
    model, task, optimizer = _sgd_vanilla()
    head = model.get_classifier().weight
    head.register_hook(lambda grad: grad * float('inf'))
    before = head.detach().clone()
    with pytest.raises(DivergenceError, match=r'non-finite grad_norm') as error:
        train_one_epoch(0, task, _loader(10), optimizer, torch.device('cpu'), clip_grad=1.0, log_interval=0)
    assert 'loss (' not in str(error.value), 'the loss was finite'
    assert torch.equal(head.detach(), before)


def _buffers(model: nn.Module):
    return [b.clone() for b in model.buffers()]


def test_skipped_steps_leave_weights_statistics_and_the_mean_loss_untouched_up_to_the_budget(caplog):
    """Two NaN batches of four with two skips allowed: the run goes on as if those batches were absent (their NaN
    BN statistics undone), says so twice, and a third NaN batch stops it."""
    model, task, optimizer = _sgd_vanilla()
    guard = NonFiniteGuard(max_skips=2)
    loader = _nan_batches(_loader(20), {1, 2})
    metrics = train_one_epoch(0, task, loader, optimizer, torch.device('cpu'), log_interval=0, guard=guard)
    assert guard.skipped == 2 and caplog.text.count('Skipped a training step') == 2
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(torch.isfinite(b.float()).all() for b in model.buffers()), 'a skipped forward left NaN statistics'
    assert torch.isfinite(torch.tensor(metrics['loss'])) and 'grad_norm' not in metrics

    # the good batches alone, from the same start, give the same weights and statistics
    reference, reference_task, reference_optimizer = _sgd_vanilla()
    train_one_epoch(0, reference_task, [loader[0], loader[3]], reference_optimizer, torch.device('cpu'),
                    log_interval=0)
    for ours, theirs in zip([*model.parameters(), *_buffers(model)],
                            [*reference.parameters(), *_buffers(reference)]):
        if ours.is_floating_point():
            torch.testing.assert_close(ours, theirs)

    with pytest.raises(DivergenceError, match=r'after skipping 2 such step\(s\) \(--skip-nonfinite 2\)'):
        train_one_epoch(1, task, _nan_batches(_loader(10), {1}), optimizer, torch.device('cpu'), log_interval=0,
                        guard=guard)


def test_a_step_synchronizes_with_the_device_once(monkeypatch):
    """The finiteness check rides on the transfer that logs the losses: one ``tolist`` per step, no ``item``."""
    _, task, optimizer = _sgd_vanilla()
    calls = []
    for name in ('item', 'tolist', '__bool__', '__float__'):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _f=original, _n=name: calls.append(_n) or _f(self, *a))
    train_one_epoch(0, task, _loader(15), optimizer, torch.device('cpu'), clip_grad=1.0, log_interval=0)
    monkeypatch.undo()
    assert calls == ['tolist'] * 3


def test_the_checkpoint_state_must_be_finite():
    """Weights, buffers, the EMA and the optimizer state: a NaN anywhere is named, and nothing is saved."""
    model, task, optimizer = _sgd_vanilla()
    train_one_epoch(0, task, _loader(10), optimizer, torch.device('cpu'), log_interval=0)
    task.setup_ema(decay=0.9)
    check_finite_state(task, optimizer, epoch=0)
    for tensor, name in ((model.get_classifier().bias, 'state_dict.fc.bias'),
                         (next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d)).running_var, 'running_var'),
                         (next(iter(optimizer.state.values()))['momentum_buffer'], 'optimizer.state.0'),
                         (next(task.get_trainable_module(ema=True).parameters()), 'state_dict_ema')):
        saved = tensor.detach().clone()
        with torch.no_grad():
            tensor.view(-1)[0] = float('inf')
        with pytest.raises(DivergenceError, match=r'non-finite .*after epoch 3') as error:
            check_finite_state(task, optimizer, epoch=3)
        assert name in str(error.value)
        with torch.no_grad():
            tensor.copy_(saved)
    check_finite_state(task, optimizer, epoch=0)


def test_the_progress_bar_shows_loss_and_throughput_and_stays_off_when_asked(capsys):
    """A person at a terminal sees a bar over the batches with the running loss and images/s; runs without one
    (CI, logs, --no-progress) print nothing."""
    model = _model('test_mbn_resnet')
    task = _task('vanilla', model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train_one_epoch(0, task, _loader(8), optimizer, torch.device('cpu'), log_interval=0, progress=True)
    bar = capsys.readouterr().err
    assert 'train 0' in bar and 'loss=' in bar and 'img_s=' in bar
    train_one_epoch(1, task, _loader(8), optimizer, torch.device('cpu'), log_interval=0, progress=False)
    assert capsys.readouterr().err == ''
