"""``python -m timm_advnorm.convert <format> SRC DST`` (console script ``timm-advnorm-convert``).

Formats:

* ``fast-advprop``: a Fast AdvProp checkpoint to ``mbn_<arch>`` (or, with ``--branch``, one branch as ``<arch>``);
* ``nofrost``: a NoFrost checkpoint to timm's ``nf_resnet26``/``nf_resnet50``;
* ``tensorpack-resnet``: Feature Denoising's tensorpack ``R152.npz`` (or R50/R101) to timm's ``resnet152``.

DST becomes an export folder (``config.json`` + ``model.safetensors``):
``timm_advnorm.hub.create_model_from_name_or_checkpoint('local-dir:DST')`` loads it as converted (with the TensorFlow
"SAME" padding a tensorpack conversion records; ``timm.create_model('local-dir:DST', pretrained=True)`` loads the
weights but not the padding), and ``timm-advnorm-publish DST ...`` publishes it with a model card.
"""
import logging
import sys
from pathlib import Path
from typing import List, Optional

from ..convert import convert_fast_advprop, convert_nofrost, convert_tensorpack_resnet
from ..weights.export import check_folder_target
from ..write_guard import check_write_target
from .parser import ArgumentParser, run_cli

__all__ = ['get_args_parser', 'main', 'run', 'console_main']

PROG = 'timm-advnorm-convert'
#: The file SRC is, by format: what its help and its refusal of a folder say.
SOURCE_FILES = {
    'fast-advprop': 'checkpoint saved by fast_advprop/imagenet.py (.pth.tar)',
    'nofrost': 'best_RA.pth, best_SA.pth or latest.pth',
    'tensorpack-resnet': 'R152.npz (or an R50/R101 .npz of the same code)',
}


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the converter command, one sub-command per source format."""
    parser = ArgumentParser(
        prog=prog, description="Convert the authors' released robust checkpoints to timm exports.")
    formats = parser.add_subparsers(dest='format', required=True, metavar='FORMAT')

    def add(name: str, help_text: str, src_help: str) -> ArgumentParser:
        sub = formats.add_parser(name, help=help_text, description=help_text)
        sub.add_argument('src', metavar='SRC', help=src_help)
        sub.add_argument('dst', metavar='DST', help='export folder to write')
        sub.add_argument('--model', help='target architecture (default: detected from the weights)')
        sub.add_argument('--overwrite', action='store_true', help='replace DST, an earlier export')
        return sub

    fast = add('fast-advprop', 'Fast AdvProp (Mei et al., ICLR 2022) mixture-BN ResNet checkpoint.',
               SOURCE_FILES['fast-advprop'])
    fast.add_argument('--branch', choices=('clean', 'adv'),
                      help='write one branch as the plain timm ResNet (Fast AdvProp infers on clean)')
    add('nofrost', 'NoFrost (Wang et al., ICML 2022) NF-ResNet checkpoint.', SOURCE_FILES['nofrost'])
    add('tensorpack-resnet', 'Feature Denoising (Xie et al., CVPR 2019) tensorpack ResNet baseline.',
        SOURCE_FILES['tensorpack-resnet'])
    return parser


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Parse `argv` and convert; returns the exit status. Bad input raises (see `run`)."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    parser = get_args_parser(prog)
    args = parser.parse_args(argv)
    if Path(args.src).is_dir():  # every format converts one file of the authors' release
        parser.error(f'SRC {args.src} is a folder; {args.format} converts one file: {SOURCE_FILES[args.format]}')
    check_write_target(args.dst, 'DST', {'the checkpoint being converted': args.src})
    check_folder_target(args.dst, args.overwrite)  # before the checkpoint is read: a refusal costs no load
    if args.format == 'fast-advprop':
        convert_fast_advprop(args.src, args.dst, args.model, branch=args.branch, overwrite=args.overwrite)
    elif args.format == 'nofrost':
        convert_nofrost(args.src, args.dst, args.model, overwrite=args.overwrite)
    else:
        convert_tensorpack_resnet(args.src, args.dst, args.model, overwrite=args.overwrite)
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-convert`` console command."""
    sys.exit(run())
