"""A cell's planned training budget, counted before anything trains (``--dry-run``).

The cell's training options (typed and checked as the training command builds them,
`timm_advnorm.study.options.CellCommands.train_options`) build its model and method as the command builds them (no
weights, no data read), and `timm_advnorm.train.budget.count_budget` counts the papers' passes and the FLOPs of one
pass on a meta-device copy of the model.
"""
from pathlib import Path
from typing import Optional

import timm
from timm.data import resolve_data_config

from ..attacks import InputSpace
from ..data import builtin_dataset, dataset_img_size, dataset_num_classes
from ..train.budget import RunBudget, count_budget
from ..train.build import create_run_task
from ..train.model_options import architecture_kwargs
from ..train.optimization import epoch_schedule
from ..train.options import TrainOptions

__all__ = ['IMAGENET_SPLIT_IMAGES', 'plan_cell_budget', 'split_images']

#: Images in ImageNet-1k's splits, the ImageNet scale's data (counted without reading the folder).
IMAGENET_SPLIT_IMAGES = {'train': 1_281_167, 'validation': 50_000}


def split_images(dataset: str, split: str = 'train') -> int:
    """Images of `split` (``train`` or ``validation``): the built-in dataset's, counted where it is rendered at its
    own side (rendered there if not yet: one rendering, whatever sides a study's cells ask for, whose counts are the
    same), or ImageNet-1k's."""
    builtin = builtin_dataset(dataset)
    if builtin is not None:
        root = Path(builtin.prepare(img_size=builtin.img_size)) / split
        return sum(1 for path in root.rglob('*.png'))
    return IMAGENET_SPLIT_IMAGES[split]


def plan_cell_budget(options: TrainOptions, world_size: int = 1, train_images: Optional[int] = None) -> RunBudget:
    """The counted budget of the training run `options` describe (checked by the method already), on `world_size`
    processes.

    Args:
        train_images: Images of the training split (default: the built-in dataset's count, or ImageNet-1k's).
    """
    data = options.data
    num_classes = dataset_num_classes(data.dataset, data.num_classes)
    img_size = dataset_img_size(data.dataset, data.img_size)
    model = timm.create_model(options.model.model, num_classes=num_classes, **architecture_kwargs(options.model))
    data_config = resolve_data_config(dict(img_size=img_size, mean=data.mean, std=data.std), model=model)
    task = create_run_task(options, model, InputSpace.from_data_config(data_config), num_classes=num_classes,
                           device='cpu', verbose=False)
    epochs = epoch_schedule(options.schedule, task.passes_per_image).epochs
    batch_size = int(round(data.batch_size * task.batch_scale))
    images = train_images if train_images is not None else split_images(data.dataset)
    return count_budget(task, (batch_size, *data_config['input_size']), train_images=images, epochs=epochs,
                        world_size=world_size, model_name=options.model.model, device='cpu')
