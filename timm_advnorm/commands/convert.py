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
import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import List, Optional

from ..convert import convert_fast_advprop, convert_nofrost, convert_tensorpack_resnet
from ..convert.options import FORMATS, ConvertOptions
from ..option_fields import options_from_values
from ..weights.export import check_folder_target
from ..write_guard import check_write_target
from .options import declarations_of
from .parser import ArgumentParser, run_cli

__all__ = ['get_args_parser', 'convert_options', 'main', 'run', 'console_main']

PROG = 'timm-advnorm-convert'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the converter command, one sub-command per source format (`convert.options.FORMATS`), each
    generated from the declarations of its options class's fields in their order, SRC's help the format's file."""
    parser = ArgumentParser(
        prog=prog, description="Convert the authors' released robust checkpoints to timm exports.")
    formats = parser.add_subparsers(dest='format', required=True, metavar='FORMAT')
    for name, source_format in FORMATS.items():
        sub = formats.add_parser(name, help=source_format.title, description=source_format.title)
        for dest, declared in declarations_of([source_format.options_class]).items():
            if dest == 'src':
                declared = dataclasses.replace(declared, arguments={**declared.arguments, 'help': source_format.source})
            declared.add(sub, sub)
    return parser


def convert_options(args: argparse.Namespace) -> ConvertOptions:
    """The typed options of the conversion `args` (as `get_args_parser` parses them) describe, its format's options
    class filled by option name (`option_fields.options_from_values`)."""
    return options_from_values(FORMATS[args.format].options_class, vars(args))


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Parse `argv` and convert; returns the exit status. Bad input raises (see `run`)."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    parser = get_args_parser(prog)
    options = convert_options(parser.parse_args(argv))
    if Path(options.src).is_dir():  # every format converts one file of the authors' release
        parser.error(f'SRC {options.src} is a folder; {options.format} converts one file: '
                     f'{FORMATS[options.format].source}')
    check_write_target(options.dst, 'DST', {'the checkpoint being converted': options.src})
    check_folder_target(options.dst, options.overwrite)  # before the checkpoint is read: a refusal costs no load
    if options.format == 'fast-advprop':
        convert_fast_advprop(options.src, options.dst, options.model, branch=options.branch,
                             overwrite=options.overwrite)
    elif options.format == 'nofrost':
        convert_nofrost(options.src, options.dst, options.model, overwrite=options.overwrite)
    else:
        convert_tensorpack_resnet(options.src, options.dst, options.model, overwrite=options.overwrite)
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-convert`` console command."""
    sys.exit(run())
