"""The smallest training runs that go through every write of a run: a few digits per class as an image folder.

`tiny_digits` copies the first images of each class of the built-in digits into ``train/`` and ``validation/``
folders, so that an epoch is three steps; `tiny_train_argv` is a training command line on them (the README's digits
recipe with one-step attacks).
"""
import shutil
from pathlib import Path
from typing import List

__all__ = ['tiny_digits', 'tiny_train_argv']


def tiny_digits(digits_dir: Path, root: Path, train: int = 6, validation: int = 2) -> Path:
    """An image folder at `root` holding the first `train` and `validation` digits of each class."""
    source = next(digits_dir.iterdir())  # the rendered digits' folder (digits-32px)
    for split, count in (('train', train), ('validation', validation)):
        for class_dir in sorted((source / split).iterdir()):
            (root / split / class_dir.name).mkdir(parents=True)
            for image in sorted(class_dir.iterdir())[:count]:
                shutil.copy(image, root / split / class_dir.name / image.name)
    return root


def tiny_train_argv(data_dir: Path, out: Path, *extra: str) -> List[str]:
    """``train_adv.py`` arguments for a run named ``run`` under `out` on `data_dir` (a `tiny_digits` folder)."""
    return ['-c', 'digits_demo_mbn', '--dataset', '', '--num-classes', '10', '--data-dir', str(data_dir),
            '--output', str(out), '--experiment', 'run', '--batch-size', '16', '--attack-steps', '1',
            '--val-attack-steps', '1', '--num-samples', '8', '--workers', '0', '--log-interval', '0', *extra]
