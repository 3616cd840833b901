"""``timm-advnorm-publish`` (``python -m timm_advnorm.commands.publish``, ``hub/publish.py`` in a checkout): publish a
checkpoint to the Hugging Face Hub, or to a local folder, with its config and model card (`timm_advnorm.hub.publish`).

    timm-advnorm-publish output/train/run/model_best.pth.tar \\
        --results output/eval/results.json --repo-id org/mbn_resnet152.xie2020_in1k
"""
import argparse
import logging
import sys
from typing import List, Optional

from ..hub.publish import DEFAULT_CARD_TEMPLATE, publish
from ..hub.publish_options import (
    DEFAULT_COMMIT_MESSAGE, CardOptions, ExportOptions, PublishOptions, TargetOptions)
from ..layers import INFERENCE_BRANCHES
from ..messages import read_text_file
from .parser import ArgumentParser, add_hidden_alias, run_cli

__all__ = ['get_args_parser', 'publish_options', 'main', 'run', 'console_main', 'PROG']

_logger = logging.getLogger(__name__)
PROG = 'timm-advnorm-publish'


def get_args_parser(prog: str = PROG) -> ArgumentParser:
    """Arguments of the publishing command."""
    parser = ArgumentParser(
        prog=prog, description='Publish a checkpoint (weights, config.json, model card) to the Hugging '
                                           'Face Hub or a local folder.')
    parser.add_argument('checkpoint', help='timm-advnorm-train checkpoint, state dict (.pth/.safetensors), export '
                                           'folder, hf-hub:org/name or local-dir:PATH')
    parser.add_argument('--model', help='architecture, when the checkpoint does not name it (bare state dicts)')
    parser.add_argument('--use-ema', dest='ema', action='store_true', help="publish the checkpoint's EMA weights")
    add_hidden_alias(parser, parser, '--ema', 'ema', action='store_true')
    parser.add_argument('--branch', choices=INFERENCE_BRANCHES,
                        help='publish this mixture-BN branch as the plain timm architecture (no plugin needed)')
    parser.add_argument('--inference-branch', choices=INFERENCE_BRANCHES,
                        help='branch a whole mixture-BN model loads routed to, recorded in config.json (default: the '
                             'one the checkpoint records; required where it records none)')
    parser.add_argument('--results', help='timm-advnorm-validate results JSON for the card')
    parser.add_argument('--allow-reduced-results', action='store_true',
                        help='publish results of a reduced (timm-advnorm-validate --reduced, smoke-test) protocol; the '
                             'card then says so first')
    parser.add_argument('--allow-other-results', action='store_true',
                        help='publish results that evaluated other weights than those published, or that do not '
                             'record which (written before timm-advnorm-validate recorded a weights digest); the card '
                             'then says so beside the numbers')
    parser.add_argument('--repo-id', help='Hub repository org/name to upload to (token from HF_TOKEN)')
    parser.add_argument('--local-dir', help='write the exact folder that is (or would be) uploaded here')
    parser.add_argument('--dry-run', action='store_true', help='write --local-dir only, upload nothing')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace an earlier export in --local-dir, or a non-empty Hub repository')
    parser.add_argument('--private', action='store_true', help='create the Hub repository as private')
    parser.add_argument('--revision', help='Hub branch to upload to (default: main)')
    parser.add_argument('--commit-message', default=DEFAULT_COMMIT_MESSAGE, help='Hub commit message')
    parser.add_argument('--card-template', metavar='FILE',
                        help="model card template (default: the package's model_card_template.md)")
    parser.add_argument('--license', help="card license (default: the weights' pretrained config, e.g. a "
                                          "converted release's license)")
    return parser


def publish_options(args: argparse.Namespace) -> PublishOptions:
    """The typed options of the publication `args` (as `get_args_parser` parses them) describe: all publishing reads."""
    return PublishOptions(
        export=ExportOptions(checkpoint=args.checkpoint, model=args.model, ema=args.ema, branch=args.branch,
                             inference_branch=args.inference_branch),
        target=TargetOptions(repo_id=args.repo_id, local_dir=args.local_dir, dry_run=args.dry_run,
                             overwrite=args.overwrite, private=args.private, revision=args.revision,
                             commit_message=args.commit_message),
        card=CardOptions(results=args.results, allow_reduced_results=args.allow_reduced_results,
                         allow_other_results=args.allow_other_results, template=args.card_template,
                         license=args.license))


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
