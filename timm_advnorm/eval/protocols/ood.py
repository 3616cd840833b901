"""Out-of-distribution test sets of ImageNet classifiers: ImageNet-R, ImageNet-A and ImageNet-Sketch.

Each is an image folder with one folder per class, named by the class's WordNet id (wnid), as the sets are released.

* ``imagenet-r``: ImageNet-R(endition), Hendrycks et al., *The Many Faces of Robustness* (ICCV 2021): renditions
  (art, cartoons, sculptures, ...) of 200 ImageNet classes.
* ``imagenet-a``: ImageNet-A, Hendrycks et al., *Natural Adversarial Examples* (CVPR 2021): real photos of 200
  ImageNet classes that fool ResNet-50s.
* ``imagenet-sketch``: ImageNet-Sketch, Wang et al., *Learning Robust Global Representations by Penalizing Local
  Predictive Power* (NeurIPS 2019): sketches of all 1000 ImageNet classes.

A 1000-class ImageNet model is scored on a 200-class set as the sets' authors score it (``eval.py`` of
hendrycks/imagenet-r and hendrycks/natural-adv-examples): its logits restricted to the set's 200 classes
(`ClassSubset`), in the order of the sorted wnids, against labels 0..199 in that order; a class outside the 200
cannot be predicted. Labels come from the wnid of each image's folder (`OODDataset.class_map`), never from a folder's
position among those present (timm's default), which an empty or missing folder would shift. A folder whose class
folders are not the set's wnids is refused (`check_class_folders`): ImageNet's validation set given as ImageNet-R
would otherwise be scored against wrong labels.

The 200-wnid lists ship beside this module, copied byte for byte from timm 1.0.31 (huggingface/pytorch-image-models,
Apache License 2.0, commit 88a5b8491d56703f097172e1eb33aedb2a24a08b):

* ``imagenet_r_wnids.txt``: ``timm/data/_info/imagenet_r_synsets.txt`` (sha256 a6a0729f...6e83ca4); entry for
  entry, in order, the ``imagenet_r_wnids`` of ``eval.py`` of hendrycks/imagenet-r (commit 44d3a1d7), whose
  ``imagenet_r_mask`` over that file's 1000-wnid list ``all_wnids`` selects them.
* ``imagenet_a_wnids.txt``: ``timm/data/_info/imagenet_a_synsets.txt`` (sha256 9826a241...5d63bc2); the wnids, in
  ImageNet's order, of the 200 classes ``thousand_k_to_200`` of ``eval.py`` of hendrycks/natural-adv-examples
  (commit 2f866f5b, MIT License) maps to 0..199.

ImageNet's 1000 wnids, in the order of its class indices, are timm's (`timm.data.ImageNetInfo`).
"""
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from timm.data import ImageDataset, ImageNetInfo

from ...registry import Registry

__all__ = ['OODDataset', 'OOD_DATASETS', 'get_ood_dataset', 'imagenet_wnids', 'check_class_folders',
           'create_ood_dataset', 'ClassSubset', 'IMAGENET_CLASSES']

#: Classes of the ImageNet models the sets score.
IMAGENET_CLASSES = 1000
_FOLDER = Path(__file__).resolve().parent
#: Class folders named in an error line.
_NAMED = 3


@lru_cache(maxsize=None)
def imagenet_wnids() -> Tuple[str, ...]:
    """ImageNet-1k's wnids in the order of its class indices (sorted, as its class folders sort)."""
    return tuple(ImageNetInfo('imagenet-1k').label_names())


@lru_cache(maxsize=None)
def _listed_wnids(filename: str) -> Tuple[str, ...]:
    return tuple(line.strip() for line in (_FOLDER / filename).read_text().splitlines() if line.strip())


@dataclass(frozen=True)
class OODDataset:
    """One out-of-distribution test set.

    Args:
        name: Registry name, also that of its folder option (``imagenet-r``: ``--imagenet-r-dir``).
        title: How papers name it.
        reference: The paper.
        wnids_file: Its list of wnids, shipped beside this module; ``None``: all of ImageNet's classes.
    """

    name: str
    title: str
    reference: str
    wnids_file: Optional[str] = None

    @property
    def option(self) -> str:
        """The command-line option naming its folder."""
        return f'--{self.name}-dir'

    @property
    def wnids(self) -> Tuple[str, ...]:
        """Its classes' wnids, sorted: label i is the i-th."""
        return _listed_wnids(self.wnids_file) if self.wnids_file else imagenet_wnids()

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.wnids)

    def class_map(self) -> Dict[str, int]:
        """Label of each class folder name."""
        return {wnid: label for label, wnid in enumerate(self.wnids)}

    def logit_indices(self) -> Optional[List[int]]:
        """The ImageNet class index of each of its labels, for `ClassSubset`; ``None`` when it has all of them."""
        if self.wnids_file is None:
            return None
        index = {wnid: i for i, wnid in enumerate(imagenet_wnids())}
        return [index[wnid] for wnid in self.wnids]

    def to_dict(self) -> Dict[str, object]:
        """JSON-serialisable description, for results."""
        return dict(name=self.name, title=self.title, reference=self.reference, classes=self.num_classes)


_OOD_DATASETS: Registry[OODDataset] = Registry('out-of-distribution data set')
for _dataset in (
    OODDataset('imagenet-r', 'ImageNet-R', 'Hendrycks et al., ICCV 2021', 'imagenet_r_wnids.txt'),
    OODDataset('imagenet-a', 'ImageNet-A', 'Hendrycks et al., CVPR 2021', 'imagenet_a_wnids.txt'),
    OODDataset('imagenet-sketch', 'ImageNet-Sketch', 'Wang et al., NeurIPS 2019'),
):
    _OOD_DATASETS.register(_dataset.name, _dataset)

#: The out-of-distribution sets by name: a read-only view of the registry.
OOD_DATASETS: Mapping[str, OODDataset] = _OOD_DATASETS.entries


def get_ood_dataset(name: str) -> OODDataset:
    """The out-of-distribution set `name`.

    Raises:
        ValueError: Unknown name; the message lists the known ones.
    """
    return _OOD_DATASETS.get(name)


def _named(names: Sequence[str]) -> str:
    shown = ', '.join(sorted(names)[:_NAMED])
    return shown + (f' and {len(names) - _NAMED} more' if len(names) > _NAMED else '')


def check_class_folders(root: Path, dataset: OODDataset) -> None:
    """Refuse `root` unless its class folders are exactly `dataset`'s wnids (files and hidden folders aside).

    Raises:
        FileNotFoundError: `root` is not a folder.
        ValueError: Folders that are not its classes, or classes without a folder, the first few named.
    """
    if not root.is_dir():
        raise FileNotFoundError(f'{dataset.option} {root}: no such folder')
    found = {entry.name for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith('.')}
    expected = set(dataset.wnids)
    unexpected, missing = found - expected, expected - found
    if unexpected or missing:
        problems = ([f'{len(unexpected)} folders that are not its classes ({_named(list(unexpected))})']
                    if unexpected else []) + ([f'no folder for {len(missing)} of its classes ({_named(list(missing))})']
                                              if missing else [])
        raise ValueError(f'{dataset.option} {root} is not {dataset.title}: it needs one folder per class named by '
                         f'its wnid ({dataset.num_classes} classes), and has {" and ".join(problems)}')


def create_ood_dataset(dataset: OODDataset, root: Path, transform) -> ImageDataset:
    """`dataset`'s images under `root` (checked by `check_class_folders`), labelled by their folder's wnid.

    Raises:
        FileNotFoundError: `root` is not a folder.
        ValueError: Its class folders are not the set's, or they hold no image.
    """
    check_class_folders(root, dataset)
    try:
        images = ImageDataset(str(root), class_map=dataset.class_map(), transform=transform)
    except RuntimeError as e:  # timm's reader found no image
        raise ValueError(f'{dataset.option} {root}: its class folders hold no image') from e
    images._max_retries = 1  # never evaluate the next image in place of one that turned unreadable (timm tries 10)
    return images


class ClassSubset(nn.Module):
    """`model`'s logits at `indices` only, in that order: an ImageNet classifier as one of a subset of its classes.

    Args:
        model: The classifier.
        indices: Its class index of each class of the subset (a tensor on the model's device).
    """

    def __init__(self, model: nn.Module, indices: torch.Tensor):
        super().__init__()
        self.model = model
        self.register_buffer('indices', indices, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).index_select(1, self.indices)
