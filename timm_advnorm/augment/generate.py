"""Offline DeepAugment, as the original: write a distorted copy of an image folder.

``timm-advnorm-deepaugment SRC DST --net cae --weights CAE_Weights/model_final.state``
(the command: `timm_advnorm.commands.deepaugment`)

The original scripts (hendrycks/imagenet-r, ``DeepAugment/CAE_distort_imagenet.py`` and ``EDSR_distort_imagenet.py``;
NoFrost's ``deepaug/`` runs the same ones) resize each training image's shorter side to 512 px for the CAE or 128 px
for EDSR (whose ×4 output is then 512 px), pass it through the distorted network and save the result under the same
class folder and file name; NoFrost* trains on the two folders this makes (``imagenet-DeepAug-CAE``,
``imagenet-DeepAug-EDSR``) with the usual random-resized crop. Here every image gets its own distortions, drawn from
the seed and the image's path, so that a run can stop and resume without changing any image; the original
draws activation distortions per image too but redraws the weights for 5% of the images only, which gives each image
the same distribution of distortions. Each file is written to a temporary name in its folder and renamed when whole,
so an interrupted run leaves no partial image; a rerun skips the images already written and removes temporary files
a killed run left behind (so one run at a time writes a destination).
"""
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Union

import torch
import torchvision.transforms.functional as TF
from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS
from tqdm import tqdm

from ..write_guard import check_folder_writable, check_names, check_write_target, reported_write
from .deepaugment import DeepAugment

__all__ = ['NATIVE_INPUT_SIZE', 'GenerationSummary', 'generate_deepaugment_folder']

#: Shorter side each image is resized to before the network: the original's ``trn.Resize(512)`` (CAE) and
#: ``trn.Resize(128)`` (EDSR, whose ×4 output is 512 px).
NATIVE_INPUT_SIZE = {'cae': 512, 'edsr': 128}
# Prefix of the temporary files an image is written to before its rename.
_PARTIAL_PREFIX = '.deepaugment-partial-'


@dataclass
class GenerationSummary:
    """What a `generate_deepaugment_folder` run did: images written, and images skipped as already there."""

    written: int
    skipped: int


def _source_images(src: Path) -> Iterator[Path]:
    """Image files under `src` (torchvision's `IMG_EXTENSIONS`, any case), following links, in sorted order."""
    for folder, subfolders, files in os.walk(src, followlinks=True):
        subfolders.sort()
        for name in sorted(files):
            if name.lower().endswith(IMG_EXTENSIONS):
                yield Path(folder) / name


def _image_seed(seed: int, relative: Path) -> int:
    """The seed of one image's distortions: a hash of the run's seed and the image's path relative to the source."""
    digest = hashlib.sha256(f'{seed}:{relative.as_posix()}'.encode()).digest()
    return int.from_bytes(digest[:8], 'little') >> 1


def _remove_partials(dst: Path) -> None:
    """Delete the temporary files an interrupted run left under `dst`."""
    for folder, _, files in os.walk(dst):
        for name in files:
            if name.startswith(_PARTIAL_PREFIX):
                Path(folder, name).unlink(missing_ok=True)


def _save_atomic(image: Image.Image, path: Path) -> None:
    """Write `image` to `path` in the format of its suffix, through a temporary file renamed into place; an OS error
    (a full disk) is a `WriteError` naming `path`."""
    image_format = Image.registered_extensions().get(path.suffix.lower())
    if image_format is None:
        raise ValueError(f'PIL cannot write {path.suffix} images ({path})')
    temporary = path.with_name(f'{_PARTIAL_PREFIX}{os.getpid()}-{path.name}')
    with reported_write(path, 'the images written before are kept: a rerun resumes'):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            image.save(temporary, format=image_format)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def _load_image(path: Path, size: int) -> torch.Tensor:
    """The RGB image at `path`, its shorter side resized to `size` (torchvision's ``Resize(size)``), in [0, 1]."""
    try:
        with Image.open(path) as image:
            rgb = image.convert('RGB')
    except OSError as e:
        raise OSError(f'cannot read image {path}: {e}') from None
    return TF.to_tensor(TF.resize(rgb, size))


def _check_folders(src: Path, dst: Path, weights: Union[str, Path, None]) -> None:
    """The source is a folder, and the destination a folder apart from what the run reads: inside the source its
    images would be read as sources, around it the copy would mix with them."""
    if not src.is_dir():
        raise FileNotFoundError(f'Source folder not found: {src}')
    check_write_target(dst, 'DST', {'the source images': src, 'the network weights': weights})
    check_names(dst)
    if dst.exists() and not dst.is_dir():
        raise ValueError(f'The destination {dst} is a file, not a folder')
    check_folder_writable(dst)


def generate_deepaugment_folder(
        src_folder: Union[str, Path],
        dst_folder: Union[str, Path],
        net: str,
        weights: Union[str, Path, None],
        seed: int = 0,
        *,
        input_size: Optional[int] = None,
        device: Union[str, torch.device] = 'cpu',
        allow_random_weights: bool = False,
        progress: bool = False,
) -> GenerationSummary:
    """Write a DeepAugment copy of every image under `src_folder` to the same relative path under `dst_folder`.

    Images already in `dst_folder` are skipped, so a rerun resumes; the same seed gives the same bytes for every
    image, however the run is interrupted. Files are written in the source's format (by suffix, PIL's default
    settings, as the original's ``img.save``).

    Args:
        src_folder: Folder of images (any depth, e.g. ImageNet's ``train/<class>/<image>.JPEG``).
        dst_folder: Folder to write; created if needed. Must not equal, contain or lie inside `src_folder`, nor hold
            `weights`.
        net: ``'cae'`` or ``'edsr'``.
        weights: The network's original pretrained weights (see `DeepAugment`).
        seed: Seed of the distortions.
        input_size: Shorter side of the network's input (default: the original's, `NATIVE_INPUT_SIZE`).
        device: Where the network runs.
        allow_random_weights: Accept ``weights=None`` (an untrained network): for tests only.
        progress: Show a progress bar.

    Returns:
        How many images were written and how many were already there.

    Raises:
        FileNotFoundError: No source folder or weights file.
        ValueError: Bad network, weights or folders, or no image in `src_folder`.
        OSError: A source image cannot be read (naming it).
        WriteError: A file cannot be written (a full disk): one line naming it; the images written before are kept.
    """
    src, dst = Path(src_folder).expanduser(), Path(dst_folder).expanduser()
    _check_folders(src, dst, weights)
    augment = DeepAugment(net, weights, seed=seed, device=device, allow_random_weights=allow_random_weights)
    size = input_size if input_size is not None else NATIVE_INPUT_SIZE[net]
    if size < 1:
        raise ValueError(f'input_size must be a positive number of pixels, got {size}')
    sources: List[Path] = list(_source_images(src))
    if not sources:
        raise ValueError(f'No image ({", ".join(IMG_EXTENSIONS)}) under {src}')
    if dst.is_dir():
        _remove_partials(dst)
    summary = GenerationSummary(written=0, skipped=0)
    for path in tqdm(sources, desc=f'DeepAugment {net.upper()}', unit='image', disable=not progress):
        relative = path.relative_to(src)
        target = dst / relative
        if target.exists():
            summary.skipped += 1
            continue
        image = _load_image(path, size)
        distorted = augment.manual_seed(_image_seed(seed, relative)).distort(image.unsqueeze(0))[0]
        _save_atomic(TF.to_pil_image(distorted.cpu()), target)
        summary.written += 1
    return summary
