"""A study's wall time on this machine, projected before it runs (``timm-advnorm-study --plan``).

Each grid point is timed once (its seeds cost the same) on synthetic batches of its own shape, each measurement the
fastest of `TIMED_REPEATS` (a shared machine's other work makes single timings noisy), as the commands' own plans
time a run: `timm_advnorm.train.budget.plan_budget` projects a training step from a timed pass of the model and
`plan_validation` an epoch's validation from a timed clean batch and attack iteration (neither runs an attack in
full, so a grid point of a long attack plans as fast as a short one); the evaluation's passes are counted from its
protocol's plan (sanity probes sized as the command sizes them) and timed per pass and per attack update as the
evaluation times them before its first attack (`eval.cost.time_passes`, `eval.cost.time_input_step`).
What the projection leaves out (loading and decoding images, checkpoints, the processes' start) is what the cells
that already ran measured: their timing files (`runner.TIMING_FILE`) against their projection give the factor that
the remaining cells' projection is scaled by, and the plan says so.
"""
import json
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import timm
import torch
from timm.data import resolve_data_config

from ..attacks import InputSpace
from ..data import dataset_img_size, dataset_num_classes
from ..eval.options import EvalOptions
from ..eval.plan.cost import count_cost, time_input_step, time_passes
from ..eval.plan.sanity_budget import fit_sanity
from ..eval.plan.variants import model_variants
from ..eval.run.build import evaluation_plan
from ..messages import read_utf8
from ..train.budget import plan_budget, plan_validation
from ..train.build import create_run_task, validation_attack
from ..train.checks import resolve_device
from ..train.model_options import architecture_kwargs
from ..train.optimization import create_run_optimizer, epoch_schedule
from ..train.options import TrainOptions
from .cells import Cell
from .plan import split_images
from .runner import TIMING_FILE

__all__ = ['CellTime', 'device_text', 'measured_factor', 'time_cell', 'TIMED_REPEATS']

#: Timed calls of each measurement, the fastest taken: what the work takes when the machine is not busy elsewhere.
TIMED_REPEATS = 5


@dataclass(frozen=True)
class CellTime:
    """A cell's projected seconds on this machine.

    Attributes:
        training: The training steps of every epoch.
        validation: The validation of every epoch (clean split and robust subset).
        evaluation: Its ``timm-advnorm-validate`` evaluation.
        device: Where it was timed, in words (``cpu, 2 threads``, ``cuda, NVIDIA H100 80GB HBM3``).
    """

    training: float
    validation: float
    evaluation: float
    device: str = ''

    @property
    def total(self) -> float:
        return self.training + self.validation + self.evaluation

    @property
    def after_training(self) -> 'CellTime':
        """What is left of a cell that has trained: its evaluation."""
        return CellTime(0.0, 0.0, self.evaluation, self.device)


def device_text(device: torch.device) -> str:
    """`device` in words: the CPU's threads or the GPU's name."""
    if device.type == 'cuda':
        return f'cuda, {torch.cuda.get_device_name(device)}'
    threads = torch.get_num_threads()
    return f'{device.type}, {threads} thread{"s" if threads > 1 else ""}'


def _synthetic_batch(batch_size: int, input_size: Sequence[int], num_classes: int,
                     device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Normalized inputs and labels of one batch (the time of a step does not depend on the pixels)."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn((batch_size, *input_size), generator=generator)
    labels = torch.randint(num_classes, (batch_size,), generator=generator)
    return inputs.to(device), labels.to(device)


def time_cell(train: TrainOptions, evaluation: EvalOptions, world_size: int = 1) -> CellTime:
    """The projected seconds of the cell whose commands `train` and `evaluation` describe, on `world_size`
    processes side by side, each on a device like the training device here.

    The model is built as the training command builds it (no weights, no data read); it trains a few steps (its
    attack cut short) and passes on a synthetic batch while being timed, and is evaluated as it then is.
    """
    data = train.data
    device = torch.device(resolve_device(train.runtime.device))
    num_classes = dataset_num_classes(data.dataset, data.num_classes)
    img_size = dataset_img_size(data.dataset, data.img_size)
    model = timm.create_model(train.model.model, num_classes=num_classes, **architecture_kwargs(train.model))
    data_config = resolve_data_config(dict(img_size=img_size, mean=data.mean, std=data.std), model=model)
    input_size = data_config['input_size']
    space = InputSpace.from_data_config(data_config)
    task = create_run_task(train, model, space, num_classes=num_classes, device=device, verbose=False)
    task.to(device)
    epochs = epoch_schedule(train.schedule, task.passes_per_image).epochs
    batch_size = int(round(data.batch_size * task.batch_scale))
    train_images, val_images = (split_images(data.dataset, split) for split in ('train', 'validation'))
    budget = plan_budget(task, create_run_optimizer(model, train.optimizer),
                         _synthetic_batch(batch_size, input_size, num_classes, device),
                         train_images=train_images, epochs=epochs, world_size=world_size,
                         model_name=train.model.model, repeat=TIMED_REPEATS)
    val_batch_size = data.validation_batch_size or data.batch_size
    val_batch = _synthetic_batch(val_batch_size, input_size, num_classes, device)
    budget = plan_validation(
        budget, model, validation_attack(train.validation, space, None, train.runtime.seed), val_batch, val_batch,
        batch_size=val_batch_size, val_images=val_images,
        robust_images=min(train.validation.num_samples or val_images, val_images),
        branches=task.validated_branches, models=2 if task.has_ema() else 1, repeat=TIMED_REPEATS)

    model.eval()
    _, plan = evaluation_plan(evaluation, space)
    samples = min(evaluation.data.num_samples or val_images, val_images)
    if evaluation.checks.sanity == 'budget':
        plan = fit_sanity(plan, samples, pinned=evaluation.checks.sanity_pinned)
    variants = model_variants(model, evaluation.variants.gammas, evaluation.variants.interpolations)
    cost = count_cost([(plan.stages, range(samples))], len(variants), world_size)
    eval_batch = _synthetic_batch(evaluation.runtime.batch_size, input_size, num_classes, device)
    pass_seconds, passes = time_passes(model, *eval_batch, fold_bn=evaluation.runtime.fold_bn, repeat=TIMED_REPEATS)
    step_seconds = time_input_step(eval_batch[0], repeat=TIMED_REPEATS)
    evaluated = cost.with_pass_time(pass_seconds, passes, device.type, step_seconds).pass_projected_seconds
    return CellTime(budget.projected_run_seconds, budget.projected_validation_seconds, evaluated,
                    device_text(device))


def measured_factor(cells: Sequence[Cell], projected: Dict[str, CellTime]) -> Optional[Tuple[float, int]]:
    """Measured over projected seconds of the `cells` that ran in full here (both commands timed in their timing
    file), with how many there were; None when none did. `projected` holds each cell's projection by id."""
    measured = expected = 0.0
    count = 0
    for cell in cells:
        path = cell.run_dir / TIMING_FILE
        if cell.id not in projected or not path.is_file():
            continue
        try:
            timing = json.loads(read_utf8(path))
            seconds = float(timing['train_seconds']) + float(timing['validate_seconds'])
        except (ValueError, KeyError, TypeError):  # a cell interrupted between its commands, or a damaged file
            continue
        measured += seconds
        expected += projected[cell.id].total
        count += 1
    return (measured / expected, count) if count and expected > 0 else None
