"""Contracts of image-folder datasets, checked before anything is trained or evaluated.

timm's folder reader walks a split folder following symbolic links, labels every image by the name of its folder and
numbers the class folders of each split on its own. So a link back to an enclosing folder is followed until the paths
grow too long (the images under it are read some 40 times, without a word), a folder or file linked twice is read
twice, and a validation split whose class folders differ from the training split's gets other class indices: its
accuracy is then measured against the wrong labels. `scan_image_folder` finds the classes of a split as timm will
label them, refusing loops and duplicates; `split_class_map` gives both splits the training split's class indices,
and `check_num_classes` matches them with the model's head.
"""
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from timm.data.readers.class_map import load_class_map
from timm.data.readers.img_extensions import get_img_extensions
from timm.utils.misc import natural_key

from ..messages import read_text_file

__all__ = ['FolderScan', 'scan_image_folder', 'split_class_map', 'check_class_map_file', 'check_num_classes']

_logger = logging.getLogger(__name__)

#: Class names listed in a message before the rest are counted.
_LISTED_CLASSES = 5


@dataclass(frozen=True)
class FolderScan:
    """What timm's folder reader will find under a split folder.

    Attributes:
        root: The split folder.
        images: Images per class name (the name of the folder holding them; ``''`` for images in `root` itself).
    """

    root: Path
    images: Dict[str, int]

    @property
    def classes(self) -> List[str]:
        """The class names in the order timm numbers them."""
        return sorted(self.images, key=natural_key)


def _listed(names: Iterable[str]) -> str:
    names = sorted(names, key=natural_key)
    shown = ', '.join(repr(name) for name in names[:_LISTED_CLASSES])
    return shown + (f' and {len(names) - _LISTED_CLASSES} more' if len(names) > _LISTED_CLASSES else '')


def _linked_twice(first: str, second: str, real: str, kind: str) -> ValueError:
    read = 'its images' if kind == 'folder' else 'it'
    return ValueError(f'{first} and {second} are the same {kind} ({real}), reached twice through a symbolic link: '
                      f'{read} would be read twice; remove one of them')


def scan_image_folder(root: Path) -> FolderScan:
    """Count the images of each class under `root` as timm's folder reader will find them, following links as it does.

    Costs one directory listing per folder and one ``realpath`` per symbolic link (no file is opened), so it suits
    ImageNet-sized folders.

    Raises:
        ValueError: A symbolic link to a folder that encloses it (a loop), a folder or image reached twice through
            links, or a folder that cannot be listed (timm would skip its images silently).
    """
    extensions = get_img_extensions(as_set=True)
    real_root = os.path.realpath(root)
    folders = {real_root: str(root)}  # real path of every folder walked: the path it was walked by
    linked_images: Dict[str, str] = {}  # real path of every image reached through a link: the link
    images: Dict[str, int] = {}
    pending: List[Tuple[str, str, Tuple[str, ...]]] = [(str(root), real_root, (real_root,))]
    while pending:
        path, real, enclosing = pending.pop()
        label = os.path.basename(path) if path != str(root) else ''
        try:
            with os.scandir(path) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as e:
            raise ValueError(f'cannot list the data folder {path}: {e.strerror}') from e
        subfolders = []
        for entry in entries:
            if entry.is_dir():  # follows links, as timm's walk does
                child = os.path.realpath(entry.path) if entry.is_symlink() else os.path.join(real, entry.name)
                if child in enclosing or real.startswith(child.rstrip(os.sep) + os.sep):  # above the root, too
                    raise ValueError(f'{entry.path} is a symbolic link to {child}, a folder that encloses it: the '
                                     f'images under it would be read over and over; remove the link')
                if child in folders:
                    raise _linked_twice(folders[child], entry.path, child, 'folder')
                folders[child] = entry.path
                subfolders.append((entry.path, child, enclosing + (child,)))
            elif os.path.splitext(entry.name)[1].lower() in extensions:
                images[label] = images.get(label, 0) + 1
                if entry.is_symlink():
                    target = os.path.realpath(entry.path)
                    if target in linked_images:
                        raise _linked_twice(linked_images[target], entry.path, target, 'image')
                    linked_images[target] = entry.path
        pending.extend(reversed(subfolders))  # walked in name order
    for target, link in linked_images.items():  # a link to an image the walk lists in its own folder too
        folder = folders.get(os.path.dirname(target))
        if folder is not None and os.path.splitext(target)[1].lower() in extensions:
            raise _linked_twice(os.path.join(folder, os.path.basename(target)), link, target, 'image')
    if not images:
        raise ValueError(f'no images under {root} (files ending {", ".join(sorted(extensions))})')
    return FolderScan(Path(root), images)


def check_class_map_file(class_map: str) -> None:
    """Check, before anything is built, that ``--class-map`` names a readable class map: timm reads a text one
    deep in the set-up, where a binary file fails with Python's "'utf-8' codec can't decode byte", naming no file.

    Raises:
        FileNotFoundError: No such file.
        ValueError: A folder, or a text class map that is not UTF-8 text.
    """
    if class_map and not class_map.endswith('.pkl'):  # timm unpickles a .pkl map; any other is text
        read_text_file(class_map, '--class-map', 'a text file of class names, one per line (or a .pkl class map)')


def split_class_map(train: FolderScan, val: FolderScan, class_map: str = '') -> Dict[str, int]:
    """The class-to-index map of both splits: the training split's folder names, numbered as timm numbers them, or
    the ``--class-map`` file's map when one is given.

    Raises:
        ValueError: Without a class map, class folders of one split that the other lacks; with one, a class map that
            cannot be read.
    """
    if class_map:
        try:
            mapping = load_class_map(class_map, str(train.root))
        except (AssertionError, OSError, ValueError) as e:
            raise ValueError(f'--class-map {class_map}: {e}') from e
        for scan in (train, val):
            unmapped = set(scan.images) - set(mapping)
            if unmapped:
                _logger.warning('--class-map %s maps no class of %d image folder(s) of %s, whose %d images are left '
                                'out: %s.', class_map, len(unmapped), scan.root,
                                sum(scan.images[name] for name in unmapped), _listed(unmapped))
        return mapping
    only_val, only_train = set(val.images) - set(train.images), set(train.images) - set(val.images)
    if only_val or only_train:
        differences = [f'only {scan.root} has {_listed(names)}'
                       for scan, names in ((val, only_val), (train, only_train)) if names]
        raise ValueError(f'the training and validation splits have other class folders ({"; ".join(differences)}): '
                         f'their class indices would disagree; give both the same classes, or a --class-map')
    return {name: index for index, name in enumerate(train.classes)}


def check_num_classes(num_classes: int, class_map: Dict[str, int], explicit_map: bool, source: str) -> None:
    """The model's classes must be the data's: as many as its class folders, or with an explicit ``--class-map``,
    enough for every index the map gives (a model with more classes is then evaluated or trained on some of them).

    Args:
        num_classes: The model's classes.
        class_map: The data's class-to-index map.
        explicit_map: Whether `class_map` was given by ``--class-map``.
        source: What sets the model's class count, for the message (``'the checkpoint x.pth.tar'``).

    Raises:
        ValueError: The class counts differ.
    """
    if explicit_map:
        needed = max(class_map.values()) + 1
        if num_classes < needed:
            raise ValueError(f'the model has {num_classes} classes ({source}) but the --class-map gives class index '
                             f'{needed - 1}')
    elif num_classes != len(class_map):
        raise ValueError(f'the model has {num_classes} classes ({source}) but the data has {len(class_map)} classes '
                         f'(class folders); use data with as many, or a --class-map saying which of the model\'s '
                         f'classes each folder is')
