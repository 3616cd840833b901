"""``timm-advnorm-deepaugment`` (``python -m timm_advnorm.commands.deepaugment``): write a DeepAugment copy of an
image folder, resumable (`timm_advnorm.augment.generate`).

    timm-advnorm-deepaugment SRC DST --net cae --weights CAE_Weights/model_final.state
"""
import logging
import sys
from typing import List, Optional

import torch

from ..augment.deepaugment import NETS
from ..augment.generate import generate_deepaugment_folder
from .options import DEVICE
from .parser import ArgumentParser, run_cli

__all__ = ['get_args_parser', 'main', 'run', 'console_main', 'PROG']

_logger = logging.getLogger(__name__)
PROG = 'timm-advnorm-deepaugment'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the offline DeepAugment command."""
    parser = ArgumentParser(prog=prog, description=(
        'Write a DeepAugment copy of an image folder (Hendrycks et al., ICCV 2021), resumable, with the original '
        'pretrained CAE or EDSR weights.'))
    parser.add_argument('src', metavar='SRC', help='folder of images, e.g. ImageNet train/')
    parser.add_argument('dst', metavar='DST', help='folder to write (same relative paths); a rerun resumes it')
    parser.add_argument('--net', choices=NETS, required=True, help='image-to-image network')
    parser.add_argument('--weights', metavar='FILE', help=(
        "the network's original weights: CAE_Weights/model_final.state or EDSR_Weights/edsr_baseline_x4.pt of "
        'hendrycks/imagenet-r'))
    parser.add_argument('--seed', type=int, default=0, help='seed of the distortions (default: 0)')
    parser.add_argument('--input-size', type=int, metavar='PX', help=(
        'shorter side fed to the network (default: 512 for cae, 128 for edsr, as the original)'))
    DEVICE.add(parser, default='cuda' if torch.cuda.is_available() else 'cpu', help='where to run')
    parser.add_argument('--allow-random-weights', action='store_true', help=(
        'run an untrained network when --weights is not given (tests only: the output is not DeepAugment)'))
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    return parser


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Parse `argv` and generate; returns the exit status. Bad input raises (see `run`)."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    args = get_args_parser(prog).parse_args(argv)
    summary = generate_deepaugment_folder(
        args.src, args.dst, args.net, args.weights, args.seed, input_size=args.input_size, device=args.device,
        allow_random_weights=args.allow_random_weights, progress=not args.no_progress)
    _logger.info('%s: wrote %d images, %d were already there', args.dst, summary.written, summary.skipped)
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-deepaugment`` console command."""
    sys.exit(run())


if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.commands.deepaugment'))
