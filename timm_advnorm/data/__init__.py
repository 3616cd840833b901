"""Built-in datasets and dataset-name resolution shared by `train_adv.py` and `validate_adv.py`."""
from pathlib import Path
from typing import Optional, Tuple

from .digits import DIGITS_NUM_CLASSES, default_digits_root, prepare_digits

__all__ = ['DIGITS_NUM_CLASSES', 'default_digits_root', 'prepare_digits', 'resolve_dataset']


def resolve_dataset(dataset: str, data_dir: Optional[str], img_size: int = 32) -> Tuple[str, Optional[str]]:
    """Map our built-in dataset names onto what timm's `create_dataset` takes.

    ``digits`` becomes an image folder rendered on first use (under `data_dir` when given, else in the user
    cache); any other name is passed to timm unchanged.

    Returns:
        ``(timm_dataset_name, root)``.
    """
    if dataset == 'digits':
        root = prepare_digits(Path(data_dir) / f'digits-{img_size}px' if data_dir else None, img_size=img_size)
        return '', str(root)
    return dataset, data_dir
