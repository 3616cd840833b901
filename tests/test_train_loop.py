"""The training epoch and per-epoch validation: what they log, which branches they validate, what ranks checkpoints."""
import pytest
import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.task import TASKS, VanillaTask, create_task
from timm_advnorm.train.loop import eval_metric_for, metric_names, train_one_epoch, validate, validation_message

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
    return create_task(method, model, attack=_attack())


@pytest.mark.parametrize('method', sorted(TASKS))
def test_validation_reports_the_metrics_the_task_names_and_ranks_by_one_of_them(method):
    """What `validate` returns for the task's branches is exactly `metric_names`, which holds the default ranking
    metric; the image count is reported beside the accuracies, never among them."""
    task = _task(method, _model('test_nfr_resnet' if method == 'nofrost' else 'test_mbn_resnet'))
    branches = task.validated_branches
    result = validate(task.get_eval_model(), _loader(8), torch.device('cpu'), _attack(), robust_loader=_loader(6, seed=1),
                      branches=branches)
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


def test_validation_message_counts_the_attacked_images_in_words():
    message = validation_message({'top1': 97.5, 'robust_top1': 40.0}, 359)
    assert message == 'top1: 97.50, robust_top1: 40.00 (robust top-1 on 359 images)'


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
