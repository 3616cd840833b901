"""What an offline DeepAugment run is told, as typed, frozen options: built once from the command line and read by
`generate.generate_deepaugment_folder`'s caller, ``timm-advnorm-deepaugment``.

Each field declares its command-line option (`option_fields.option`: the flag's help and parser arguments, its
default the field's), as the other commands' options do: the command generates its parser from these declarations
and fills the options by option name (`timm_advnorm.commands.deepaugment.deepaugment_options`).
"""
from dataclasses import MISSING, dataclass
from typing import Optional

import torch

from ..option_fields import option
from .deepaugment import NETS

__all__ = ['DeepAugmentOptions']


@dataclass(frozen=True)
class DeepAugmentOptions:
    """A DeepAugment copy of an image folder to write.

    Attributes:
        src: The folder of images (e.g. ImageNet ``train/``).
        dst: The folder to write, at the same relative paths; a rerun resumes it.
        net: The image-to-image network (`deepaugment.NETS`).
        weights: The network's original weights file (None: refused unless `allow_random_weights`).
        seed: The seed of the distortions.
        input_size: The shorter side fed to the network (None: the original's, 512 for cae, 128 for edsr).
        device: Where to run (default: cuda where this machine has it, else cpu).
        allow_random_weights: Run an untrained network when `weights` is None (tests only).
        progress: Show a progress bar.
    """

    src: str = option(MISSING, 'folder of images, e.g. ImageNet train/', flags=('src',), metavar='SRC')
    dst: str = option(MISSING, 'folder to write (same relative paths); a rerun resumes it', flags=('dst',),
                      metavar='DST')
    net: str = option(MISSING, 'image-to-image network', choices=NETS, required=True)
    weights: Optional[str] = option(
        None, "the network's original weights: CAE_Weights/model_final.state or EDSR_Weights/edsr_baseline_x4.pt of "
              'hendrycks/imagenet-r', metavar='FILE')
    seed: int = option(0, 'seed of the distortions (default: 0)', type=int, own=True)
    input_size: Optional[int] = option(
        None, 'shorter side fed to the network (default: 512 for cae, 128 for edsr, as the original)', type=int,
        metavar='PX', own=True)
    device: str = option('cuda' if torch.cuda.is_available() else 'cpu', 'where to run')
    allow_random_weights: bool = option(
        False, 'run an untrained network when --weights is not given (tests only: the output is not DeepAugment)')
    progress: bool = option(True, 'no progress bar', dest='no_progress', off_switch=True)
