"""The budget planner (`timm_advnorm.train.budget`): the passes and FLOPs it plans are what a short real run counts.

A real run here is the training loop's own epoch (`train_one_epoch`) over a small loader, under the same FLOP counter;
the tasks are built from the training command's parsed options, as the command builds them.
"""
import math
import os
import subprocess
import sys
from typing import List, Tuple

import pytest
import timm
import torch
import yaml
from torch.utils.data import DataLoader, DistributedSampler

import timm_advnorm  # noqa: F401  (registers the models and the methods)
from timm_advnorm.attacks import InputSpace
from timm_advnorm.task import AdversarialClassificationTask
from timm_advnorm.commands.train import get_args_parser, train_options
from timm_advnorm.train.build import create_run_task
from timm_advnorm.train.budget import (
    RunBudget, count_budget, flop_counter, plan_budget, steps_per_epoch, write_budget)
from timm_advnorm.train.loop import train_one_epoch

pytestmark = pytest.mark.usefixtures('one_thread')

NUM_CLASSES = 10
IMG_SIZE = 32
BATCH_SIZE = 8
TRAIN_IMAGES = 30
EPOCHS = 2
#: Methods and their options: PGD-2 for the attack-based ones, Fast AdvProp's PGD-2 at its paper's budget.
METHODS = {'vanilla': (), 'madry': (), 'mbn': (), 'fast_advprop': ('--attack-eps', '1', '--attack-step', '1')}
CPU = torch.device('cpu')


def _task(method: str, steps: int = 2) -> AdversarialClassificationTask:
    """The method's task on a fresh, seeded ``test_mbn_resnet`` with a PGD-`steps` training attack, built from the
    training command's options."""
    args = get_args_parser().parse_args(['--method', method, '--attack-steps', str(steps),
                                         '--attack-clean-start-prob', '0', '--seed', '0', *METHODS[method]])
    args.rank, args.distributed = 0, False
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    return create_run_task(train_options(args), model, InputSpace.from_model(model), num_classes=NUM_CLASSES,
                           verbose=False)


def _rows(task: AdversarialClassificationTask) -> int:
    """Rows of the task's loader batch, as the training command sizes it."""
    return int(round(BATCH_SIZE * task.batch_scale))


def _loader(rows: int, images: int = TRAIN_IMAGES):
    """A training loader's batches: `images` seeded images in batches of `rows`, the last partial one dropped."""
    generator = torch.Generator().manual_seed(0)
    x = InputSpace().from_pixels(torch.rand(images, 3, IMG_SIZE, IMG_SIZE, generator=generator))
    y = torch.randint(0, NUM_CLASSES, (images,), generator=generator)
    return [(xb, yb) for xb, yb in zip(x.split(rows), y.split(rows)) if len(xb) == rows]


def _optimizer(task: AdversarialClassificationTask) -> torch.optim.Optimizer:
    return torch.optim.SGD(task.attack_module().parameters(), lr=0.01, momentum=0.9)


def _real_run(task: AdversarialClassificationTask) -> Tuple[List[int], int]:
    """Train `task` for `EPOCHS` epochs on `_loader`; the FLOPs counted in each epoch and the images trained."""
    loader = _loader(_rows(task))
    optimizer = _optimizer(task)
    flops = []
    for epoch in range(EPOCHS):
        with flop_counter() as counter:
            train_one_epoch(epoch, task, loader, optimizer, CPU, log_interval=0)
        flops.append(counter.get_total_flops())
    return flops, EPOCHS * sum(len(x) for x, _ in loader)


def _count(task: AdversarialClassificationTask) -> RunBudget:
    return count_budget(task, (_rows(task), 3, IMG_SIZE, IMG_SIZE), train_images=TRAIN_IMAGES, epochs=EPOCHS,
                        model_name='test_mbn_resnet')


def _plan(task: AdversarialClassificationTask, world_size: int = 1) -> RunBudget:
    return plan_budget(task, _optimizer(task), _loader(_rows(task))[0], train_images=TRAIN_IMAGES, epochs=EPOCHS,
                       world_size=world_size, model_name='test_mbn_resnet')


@pytest.fixture(scope='module')
def vanilla_flops_per_image(one_thread) -> float:
    """FLOPs per image of a real vanilla training step: one pass, the papers' unit."""
    task = _task('vanilla')
    batch = _loader(BATCH_SIZE)[0]
    with flop_counter() as counter:
        train_one_epoch(0, task, [batch], _optimizer(task), CPU, log_interval=0)
    return counter.get_total_flops() / BATCH_SIZE


@pytest.mark.parametrize('method', METHODS)
def test_the_planned_passes_are_the_cost_model_times_the_images_a_short_run_trains(method):
    task = _task(method)
    budget = _count(task)
    _, images = _real_run(task)
    assert budget.images_per_epoch * budget.epochs == images
    assert budget.passes_total == pytest.approx(task.passes_per_image * images, rel=1e-12)


@pytest.mark.parametrize('method', METHODS)
def test_the_flops_per_pass_are_a_real_vanilla_steps_per_image(method, vanilla_flops_per_image):
    """The unit is the model's, whatever the method: counted on a meta copy, it is exactly what a real vanilla
    training step counts per image; the run's FLOPs are its passes times that."""
    budget = _count(_task(method))
    assert budget.flops_per_pass == vanilla_flops_per_image
    assert budget.flops_total == pytest.approx(budget.passes_total * vanilla_flops_per_image, rel=1e-12)


@pytest.mark.parametrize('method', METHODS)
def test_the_planned_step_flops_are_what_a_short_real_run_counts(method):
    """The step the planner counts (at 1 and 2 attack iterations, extrapolated to 3) costs, per image, what every
    step of a real PGD-3 run costs once warm: a real run's first step also checks its attack's BN-folded model once,
    on one sample (`BatchNormFolder`)."""
    task = _task(method, steps=3)
    budget = _plan(task)
    assert task.attack_steps == (0 if method == 'vanilla' else 3), 'the plan gives the attack its iterations back'
    flops, images = _real_run(_task(method, steps=3))
    images_per_epoch = images // EPOCHS
    assert flops[1:] == pytest.approx([budget.step_flops_per_image * images_per_epoch] * (EPOCHS - 1), rel=1e-12)
    assert flops[0] >= budget.step_flops_per_image * images_per_epoch * (1 - 1e-12)


def test_a_vanilla_step_costs_its_cost_model_and_an_attack_iteration_less_than_a_pass():
    """Vanilla's counted step is exactly one pass per image; PGD's iterations compute no parameter gradients, so a
    madry or mbn step counts fewer FLOPs than the papers' K + 1 or K + 2 passes, and more than its training passes."""
    for method, training_passes in (('vanilla', 1), ('madry', 1), ('mbn', 2)):
        budget = _plan(_task(method))
        model_flops = budget.passes_per_image * budget.flops_per_pass
        if method == 'vanilla':
            assert budget.step_flops_per_image == model_flops
        else:
            assert training_passes * budget.flops_per_pass < budget.step_flops_per_image < model_flops


def test_the_plan_projects_a_step_from_measured_passes_and_the_run_to_the_world_size():
    budget = _plan(_task('madry'), world_size=2)
    assert budget.pass_seconds > 0 and budget.update_seconds > 0 and budget.peak_memory_bytes > 0
    assert budget.timed_passes == BATCH_SIZE
    assert budget.step_seconds == pytest.approx(3 * BATCH_SIZE * budget.pass_seconds + budget.update_seconds)
    assert budget.steps_per_epoch == math.ceil(TRAIN_IMAGES / 2) // BATCH_SIZE == 1
    assert budget.images_per_epoch == BATCH_SIZE * 2
    assert budget.projected_epoch_seconds == budget.step_seconds * budget.steps_per_epoch
    assert budget.projected_run_seconds == budget.projected_epoch_seconds * EPOCHS
    assert f'(projection from {BATCH_SIZE} measured forward+backward passes of the model on cpu: 3 passes x ' \
           f'{BATCH_SIZE} images x ' in budget.format()


@pytest.mark.parametrize('images, batch_size, world_size', [(14, 4, 1), (14, 4, 2), (17, 3, 4), (5, 2, 3)])
def test_steps_per_epoch_are_those_of_a_training_loader(images, batch_size, world_size):
    """timm's training loader: the distributed sampler pads the shards to equal size, the last partial batch is
    dropped."""
    sampler = DistributedSampler(range(images), num_replicas=world_size, rank=0, shuffle=False)
    loader = DataLoader(range(images), batch_size=batch_size, sampler=sampler, drop_last=True)
    assert steps_per_epoch(images, batch_size, world_size) == len(loader)


def test_counting_changes_neither_weights_statistics_nor_gradients():
    task = _task('mbn')
    model = task.attack_module()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _count(task)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_a_real_run_records_its_epochs_beside_the_counted_budget(tmp_path):
    budget = _count(_task('vanilla')).record_epoch(2.0, 100).record_epoch(4.0, 300)
    assert budget.measured_epoch_seconds == (2.0, 4.0) and budget.measured_peak_memory_bytes == 300
    assert budget.projected_epoch_seconds is None
    write_budget(tmp_path / 'budget.yaml', budget)
    record = yaml.safe_load((tmp_path / 'budget.yaml').read_text())
    assert record == budget.to_dict()
    assert record['measured_epochs'] == 2 and record['measured_epoch_seconds'] == 3.0
    assert all(isinstance(v, (str, int, float, type(None))) for v in record.values())
    assert 'measured epoch time' in budget.format()


_CPU_PEAK_CHECK = """
import torch
from timm_advnorm.train.budget import memory_in_use_bytes, peak_memory_bytes, reset_peak_memory
cpu = torch.device('cpu')
reset = reset_peak_memory(cpu)
before = peak_memory_bytes(cpu)
block = torch.ones(16 * 2 ** 20)  # 64 MiB, written
in_use = memory_in_use_bytes(cpu)
del block
if not reset:
    assert peak_memory_bytes(cpu) >= max(before, in_use)
else:
    assert peak_memory_bytes(cpu) >= before + 60 * 2 ** 20, (peak_memory_bytes(cpu), before)
    assert reset_peak_memory(cpu)
    assert peak_memory_bytes(cpu) < before + 60 * 2 ** 20
"""


def test_the_cpu_peak_sees_a_freed_allocation_until_reset():
    """Where the kernel resets the peak (Linux, unless a sandbox refuses), a freed allocation shows in the peak until
    the next reset; elsewhere the peak only ever grows. In a fresh process whose allocator returns freed blocks at
    once (as the memory benchmark runs its cases): a long-lived one may serve the block from memory already resident."""
    env = {**os.environ, 'MALLOC_MMAP_THRESHOLD_': str(64 * 1024)}
    done = subprocess.run([sys.executable, '-c', _CPU_PEAK_CHECK], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
