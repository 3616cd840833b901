"""Named evaluation subsets: fixed lists of images that make a robust accuracy comparable with a leaderboard's.

``robustbench``: the 5000 ImageNet validation images RobustBench evaluates its ImageNet models on
(``robustbench/helper_files/imagenet_test_image_ids.txt`` of RobustBench 1.1.1, Croce et al., *RobustBench: a
standardized adversarial robustness benchmark*, NeurIPS 2021 Datasets and Benchmarks; shipped here verbatim as
``robustbench_imagenet_5000.txt``, sha256 of the original d4121626...58574). Its loader takes the first n entries
in file order and labels each image by its class folder's index among the sorted folders, as timm's image-folder
reader does; with ``--num-samples n`` evaluation takes the same first n. The list is not class-balanced (997
classes, 1 to 12 images each).
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from torch.utils.data import Dataset

from ...registry import Registry
from ..schema import EvalResults

__all__ = ['SUBSETS', 'subset_files', 'named_subset_order', 'robustbench_model_info']

_FOLDER = Path(__file__).resolve().parent
_SUBSETS: Registry[str] = Registry('subset')
_SUBSETS.register('robustbench', 'robustbench_imagenet_5000.txt')

#: Subset name -> its list of ``<class folder>/<file>`` names, shipped beside this module: a read-only view.
SUBSETS: Mapping[str, str] = _SUBSETS.entries


def subset_files(name: str) -> List[str]:
    """The image names of subset `name`, in its order.

    Raises:
        ValueError: No subset has that name; the message lists those that are.
    """
    return [line.strip() for line in (_FOLDER / _SUBSETS.get(name)).read_text().splitlines() if line.strip()]


def named_subset_order(dataset: Dataset, name: str, num_samples: int = 0) -> List[int]:
    """The dataset indices of subset `name`'s images, in the subset's order: its first `num_samples` (0: all) must be
    in the dataset; later entries the dataset has follow, as replacements for unreadable ones.

    Raises:
        ValueError: The dataset is not an image folder, or lacks some of the images to evaluate.
    """
    filenames = getattr(dataset, 'filenames', None)
    if filenames is None:
        raise ValueError(f'--subset {name} lists image files: it needs an image-folder dataset')
    index = {Path(filename).as_posix(): i for i, filename in enumerate(filenames())}
    listed = subset_files(name)
    wanted = listed[:num_samples] if num_samples else listed
    missing = [file for file in wanted if file not in index]
    if missing:
        root = getattr(getattr(dataset, 'reader', None), 'root', 'the dataset')
        raise ValueError(f'{len(missing)} of the {len(wanted)} images of --subset {name} are not in {root} (first: '
                         f'{missing[0]}); it needs the ImageNet validation images in class folders '
                         f'(<wnid>/ILSVRC2012_val_*.JPEG), as in val{os.sep} of an ImageNet image folder')
    return [index[file] for file in listed if file in index]


def _arxiv_link(paper_ids: Any) -> Optional[str]:
    ids = [paper_ids] if isinstance(paper_ids, str) else list(paper_ids or ())
    arxiv = next((i for i in ids if str(i).lower().startswith('arxiv:')), None)
    return f'https://arxiv.org/abs/{arxiv.split(":", 1)[1]}' if arxiv else None


def robustbench_model_info(results: EvalResults, pretrained_cfg: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """A ``robustbench`` protocol result in the fields of RobustBench's ``model_info/<dataset>/<threat>/<model>.json``,
    for a line-by-line comparison with a leaderboard entry; None for other protocols.

    What the evaluation cannot know (authors, venue, extra training data) is None; ``footnote`` says what ran: the
    images (the leaderboard's 5000 only with ``--subset robustbench``) and whether the budgets were reduced.
    """
    protocol = results.protocol
    if protocol.name != 'robustbench':
        return None
    eps = protocol.attacks[0]['eps']
    images = (f"the first {results.num_samples} of RobustBench's ImageNet list" if results.subset == 'robustbench'
              else f"{results.num_samples} images of {results.dataset} {results.split} (seed {results.seed}), not "
                   f"RobustBench's list")
    budgets = ', reduced budgets (not comparable)' if protocol.reduced else ''
    return dict(
        link=_arxiv_link(pretrained_cfg.get('paper_ids')), name=pretrained_cfg.get('paper_name'), authors=None,
        additional_data=None, number_forward_passes=1,
        dataset='imagenet' if results.subset == 'robustbench' else results.dataset, venue=None,
        architecture=results.model, eps=f'{eps:g}/255', clean_acc=results.top1, reported=None,
        autoattack_acc=results.robust_top1,
        footnote=f'timm-advnorm-validate --protocol robustbench (APGD-CE, APGD-T, FAB-T, Square as a cascade) '
                 f'on {images}{budgets}; variant {results.primary_variant}.')
