"""``timm-advnorm-deepaugment`` (``python -m timm_advnorm.commands.deepaugment``): write a DeepAugment copy of an
image folder, resumable (`timm_advnorm.augment.generate`).

    timm-advnorm-deepaugment SRC DST --net cae --weights CAE_Weights/model_final.state
"""
import argparse
import logging
import sys
from typing import List, Optional

from ..augment.generate import generate_deepaugment_folder
from ..augment.options import DeepAugmentOptions
from ..option_fields import options_from_values
from .options import declarations_of
from .parser import ArgumentParser, run_cli

__all__ = ['get_args_parser', 'deepaugment_options', 'main', 'run', 'console_main', 'PROG']

_logger = logging.getLogger(__name__)
PROG = 'timm-advnorm-deepaugment'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the offline DeepAugment command, generated from the declarations of the fields of
    `augment.options.DeepAugmentOptions`, in their order."""
    parser = ArgumentParser(prog=prog, description=(
        'Write a DeepAugment copy of an image folder (Hendrycks et al., ICCV 2021), resumable, with the original '
        'pretrained CAE or EDSR weights.'))
    for declared in declarations_of([DeepAugmentOptions]).values():
        declared.add(parser, parser)
    return parser


def deepaugment_options(args: argparse.Namespace) -> DeepAugmentOptions:
    """The typed options of the run `args` (as `get_args_parser` parses them) describe, filled by option name
    (`option_fields.options_from_values`)."""
    return options_from_values(DeepAugmentOptions, vars(args))


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Parse `argv` and generate; returns the exit status. Bad input raises (see `run`)."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    options = deepaugment_options(get_args_parser(prog).parse_args(argv))
    summary = generate_deepaugment_folder(
        options.src, options.dst, options.net, options.weights, options.seed, input_size=options.input_size,
        device=options.device, allow_random_weights=options.allow_random_weights, progress=options.progress)
    _logger.info('%s: wrote %d images, %d were already there', options.dst, summary.written, summary.skipped)
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-deepaugment`` console command."""
    sys.exit(run())


if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.commands.deepaugment'))
