"""Every flag of timm's ``train.py`` and ``validate.py`` (of the timm version pinned) is in ``tests/data/timm_flags.csv``
with what our commands do with it, and the commands' parsers agree with the table: a supported flag is there with
timm's default, one with another default says why, and one we do not take is absent, with its reason. A flag that
disappears, or whose default drifts from timm's, fails here."""
import ast
import csv
from pathlib import Path
from typing import Dict, List

import pytest

from timm_advnorm.commands.validate import get_args_parser as validate_parser
from timm_advnorm.commands.train import get_args_parser as train_parser

TABLE = Path(__file__).parent / 'data' / 'timm_flags.csv'
PARSERS = {'train': train_parser, 'validate': validate_parser}
TAKEN = ('supported', 'other default')
NOT_TAKEN = ('not applicable', 'deliberately not')
# Flags another change adds to the training command (the scale issue); the table keeps their place and reason.
OWNED_ELSEWHERE = 'owned elsewhere'


def _rows() -> List[Dict[str, str]]:
    with TABLE.open(newline='') as f:
        return list(csv.DictReader(f))


ROWS = _rows()


def _row_id(row: Dict[str, str]) -> str:
    return f'{row["command"]}{row["flag"]}'


def _action(command: str, flag: str):
    return PARSERS[command]()._option_string_actions.get(flag)


def _default(command: str, flag: str):
    """The flag's default as the command applies it (a hidden alias takes the default of the option it stands for)."""
    parser = PARSERS[command]()
    return parser.get_default(parser._option_string_actions[flag].dest)


def test_the_table_is_well_formed():
    seen = set()
    for row in ROWS:
        assert row['command'] in PARSERS, row
        assert row['flag'].startswith('--'), row
        assert row['status'] in TAKEN + NOT_TAKEN + (OWNED_ELSEWHERE,), row
        assert (row['command'], row['flag']) not in seen, f'{row["flag"]} listed twice'
        seen.add((row['command'], row['flag']))
        ast.literal_eval(row['timm_default'])
        if row['status'] != 'supported':
            assert row['note'], f'{_row_id(row)}: say why it is {row["status"]}'
    # the flags are in the table
    for flag in ('--lr-base', '--lr-base-size', '--lr-base-scale', '--grad-accum-steps', '--aa', '--reprob',
                 '--color-jitter', '--crop-pct', '--interpolation', '--layer-decay', '--sched-on-updates',
                 '--cooldown-epochs', '--dist-bn', '--bn-momentum', '--bn-eps', '--validation-batch-size',
                 '--recovery-interval', '--model-kwargs', '--pin-mem'):
        assert ('train', flag) in seen, flag


@pytest.mark.parametrize('row', [r for r in ROWS if r['status'] in TAKEN], ids=_row_id)
def test_a_taken_flag_is_on_the_command_with_timm_default_or_a_reason(row):
    action = _action(row['command'], row['flag'])
    assert action is not None, f'{row["command"]} lost {row["flag"]}'
    timm_default = ast.literal_eval(row['timm_default'])
    ours = _default(row['command'], row['flag'])
    if row['status'] == 'supported':
        assert ours == timm_default, f'{row["flag"]}: default {ours!r}, timm {timm_default!r}'
    else:
        assert ours != timm_default, f'{row["flag"]} has timm\'s default now: mark it supported'


@pytest.mark.parametrize('row', [r for r in ROWS if r['status'] in NOT_TAKEN], ids=_row_id)
def test_a_flag_we_do_not_take_is_absent(row):
    assert _action(row['command'], row['flag']) is None, f'{row["flag"]} is on {row["command"]}: update the table'


@pytest.mark.parametrize('command', sorted(PARSERS))
def test_help_shows_every_supported_flag(command):
    """Through ``--help``, as a user finds them (hidden aliases of our own names excepted)."""
    help_text = PARSERS[command]().format_help()
    for row in ROWS:
        if row['command'] == command and row['status'] in TAKEN and 'hidden alias' not in row['note']:
            assert row['flag'] in help_text, row['flag']
