"""``.. command-help:: train``: a console command's ``--help``, generated from its parser when the site is built.

The parser is the command's own (``timm_advnorm.commands.<name>.get_args_parser``), run in this process, so the
page cannot drift from the command. The help is formatted at a fixed width of 100 columns whatever the terminal
that builds the site, so the page is the same on every machine. A command with sub-commands
(``timm-advnorm-convert FORMAT``) gets each sub-command's help after its own.
"""
import argparse
import importlib
import os
from contextlib import contextmanager
from typing import Dict, Iterator, List

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

__all__ = ['COMMANDS', 'COLUMNS', 'CommandHelp', 'command_help', 'setup']

#: The documented commands: each a module of ``timm_advnorm.commands`` with a ``get_args_parser()``.
COMMANDS = ('train', 'validate', 'study', 'publish', 'convert', 'deepaugment', 'demo')
#: The width every help is formatted at (argparse reads it from the environment's COLUMNS).
COLUMNS = 100


@contextmanager
def _columns(width: int) -> Iterator[None]:
    before = os.environ.get('COLUMNS')
    os.environ['COLUMNS'] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ['COLUMNS']
        else:
            os.environ['COLUMNS'] = before


def _sub_commands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def command_help(name: str) -> List[tuple]:
    """The help of command `name` (one of `COMMANDS`) and of its sub-commands: ``(command line, help text)``
    pairs, the command's own first.

    Raises:
    """
    parser = importlib.import_module(f'timm_advnorm.commands.{name}').get_args_parser()
    with _columns(COLUMNS):
        return [(f'{parser.prog} --help', parser.format_help())] + [
            (f'{sub.prog} --help', sub.format_help()) for sub in _sub_commands(parser).values()]


class CommandHelp(SphinxDirective):
    """The directive: one literal block per help text, each after the command line that prints it."""
    required_arguments = 1
    has_content = False

    def run(self) -> List[nodes.Node]:
        name = self.arguments[0]
        if name not in COMMANDS:
            raise self.error(f'{self.name}: unknown command {name!r} (known: {", ".join(COMMANDS)})')
        result: List[nodes.Node] = []
        for line, text in command_help(name):
            result.append(nodes.paragraph('', '', nodes.literal(line, line), nodes.Text(':')))
            block = nodes.literal_block(text, text)
            block['language'] = 'text'
            result.append(block)
        return result


def setup(app: Sphinx) -> Dict[str, object]:
    app.add_directive('command-help', CommandHelp)
    return {'version': '1', 'parallel_read_safe': True, 'parallel_write_safe': True}
