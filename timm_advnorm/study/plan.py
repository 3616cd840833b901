"""A cell's planned training budget, counted before anything trains (``--dry-run``).

The cell's training arguments are parsed by the training command's own parser; its model and method are built as
the command builds them (no weights, no data read), and `timm_advnorm.train.budget.count_budget` counts the
papers' passes and the FLOPs of one pass on a meta-device copy of the model.
"""
from pathlib import Path
from typing import Optional, Sequence

import timm
from timm.data import resolve_data_config

from ..attacks import InputSpace
from ..commands.train import parse_args, train_options
from ..data import builtin_dataset, dataset_img_size, dataset_num_classes
from ..train.budget import RunBudget, count_budget
from ..train.build import create_run_task
from ..train.model_options import architecture_kwargs
from ..train.optimization import epoch_schedule

__all__ = ['IMAGENET_TRAIN_IMAGES', 'plan_cell_budget']

#: Images in ImageNet-1k's training split, the ImageNet scale's data (counted without reading the folder).
IMAGENET_TRAIN_IMAGES = 1_281_167


def _train_images(dataset: str, img_size: int) -> int:
    builtin = builtin_dataset(dataset)
    if builtin is not None:
        root = Path(builtin.prepare(img_size=img_size)) / 'train'
        return sum(1 for path in root.rglob('*.png'))
    return IMAGENET_TRAIN_IMAGES


def plan_cell_budget(train_argv: Sequence[str], world_size: int = 1, train_images: Optional[int] = None) -> RunBudget:
    """The counted budget of the training run `train_argv` describes, on `world_size` processes.

    Args:
        train_images: Images of the training split (default: the built-in dataset's count, or ImageNet-1k's).
    """
    args, _ = parse_args(list(train_argv))
    options = train_options(args)  # the method's checks too, before the model is made
    num_classes = dataset_num_classes(args.dataset, args.num_classes)
    img_size = dataset_img_size(args.dataset, args.img_size)
    model = timm.create_model(args.model, num_classes=num_classes, **architecture_kwargs(options.model))
    data_config = resolve_data_config(dict(img_size=img_size, mean=args.mean, std=args.std), model=model)
    task = create_run_task(options, model, InputSpace.from_data_config(data_config), num_classes=num_classes,
                           device='cpu', verbose=False)
    epochs = epoch_schedule(options.schedule, task.passes_per_image).epochs
    batch_size = int(round(args.batch_size * task.batch_scale))
    images = train_images if train_images is not None else _train_images(args.dataset, img_size or 224)
    return count_budget(task, (batch_size, *data_config['input_size']), train_images=images, epochs=epochs,
                        world_size=world_size, model_name=args.model, device='cpu')
