"""``timm-advnorm-publish`` (``python -m timm_advnorm.commands.publish``, ``hub/publish.py`` in a checkout): publish a
checkpoint to the Hugging Face Hub, or to a local folder, with its config and model card (`timm_advnorm.hub.publish`).

    timm-advnorm-publish output/train/run/model_best.pth.tar \\
        --results output/eval/results.json --repo-id org/mbn_resnet152.xie2020_in1k
"""
import argparse
import dataclasses
import logging
import sys
from typing import Dict, List, Optional

from ..hub.publish import DEFAULT_CARD_TEMPLATE, publish
from ..hub.publish_options import OPTIONS_CLASSES, PublishOptions
from ..messages import read_text_file
from ..option_fields import options_from_values
from .options import Declaration, declarations_of
from .parser import ArgumentParser, run_cli

__all__ = ['get_args_parser', 'declarations', 'publish_options', 'main', 'run', 'console_main', 'PROG']

_logger = logging.getLogger(__name__)
PROG = 'timm-advnorm-publish'
#: The options by name in the order ``--help`` shows them, all in one group; each is declared on the field it fills
#: (`hub.publish_options`).
_HELP_ORDER = ('checkpoint', 'model', 'ema', 'branch', 'inference_branch', 'results', 'allow_reduced_results',
               'allow_other_results', 'repo_id', 'local_dir', 'dry_run', 'overwrite', 'private', 'revision',
               'commit_message', 'card_template', 'license')


def declarations() -> Dict[str, Declaration]:
    """The command's options by name, from the fields of the publication's options classes that declare them
    (`hub.publish_options.OPTIONS_CLASSES`; `options.declarations_of`).

    Raises:
        ValueError: Two fields declare one option, or a field declares a shared option unlike `options.py`.
    """
    return declarations_of(OPTIONS_CLASSES)


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the publishing command, generated from the options' declarations (`declarations`)."""
    parser = ArgumentParser(
        prog=prog, description='Publish a checkpoint (weights, config.json, model card) to the Hugging '
                                           'Face Hub or a local folder.')
    declared = declarations()
    for name in _HELP_ORDER:
        declared[name].add(parser, parser)
    return parser


def publish_options(args: argparse.Namespace) -> PublishOptions:
    """The typed options of the publication `args` (as `get_args_parser` parses them) describe, each group filled by
    option name (`task.options_from_values`): all publishing reads."""
    return PublishOptions(**{field.name: options_from_values(field.type, vars(args))
                             for field in dataclasses.fields(PublishOptions)})


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Parse `argv` and publish; returns the exit status. Bad input raises (see `run`)."""
    logging.basicConfig(level=logging.INFO, format='%(message)s')
    options = publish_options(get_args_parser(prog).parse_args(argv))
    template = (read_text_file(options.card.template, '--card-template', 'a model card template (Markdown text)')
                if options.card.template else DEFAULT_CARD_TEMPLATE.read_text())
    url = publish(options, template)
    if url:
        _logger.info(f'Uploaded: {url}')
    return 0


def run(prog: str = PROG, argv: Optional[List[str]] = None) -> int:
    """Command-line entry: `main`, with bad input reported as one line and exit status 2."""
    return run_cli(lambda a: main(a, prog=prog), prog, argv)


def console_main() -> None:
    """The ``timm-advnorm-publish`` console command."""
    sys.exit(run('timm-advnorm-publish'))


if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.commands.publish'))
