"""The commands' default data-loading workers suit the machine: a default above the CPUs this process may use is
lowered to them with a one-line note; a value given (command line or config) is kept."""
import logging
import os

import pytest

from timm_advnorm import usage
from timm_advnorm.commands import train as train_adv, validate as validate_adv

VALIDATE = ['--model', 'resnet18', '--dataset', 'digits']


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(usage, 'available_cpus', lambda: 2)


def test_the_cpus_are_those_this_process_may_use():
    expected = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    assert usage.available_cpus() == expected


def test_a_default_above_the_cpus_is_lowered_with_a_one_line_note(two_cpus, caplog):
    with caplog.at_level(logging.INFO):
        assert validate_adv.parse_args(VALIDATE).workers == 2
    (note,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith('--workers')]
    assert note == ('--workers 2: the default 4 data-loading workers lowered to the 2 CPU(s) this process may use '
                    '(give --workers N to choose)')


def test_a_default_within_the_cpus_stays_quietly(two_cpus, caplog):
    with caplog.at_level(logging.INFO):
        assert train_adv.parse_args(['--dataset', 'digits'])[0].workers == train_adv.DEFAULT_WORKERS == 2
    assert not [r for r in caplog.records if r.getMessage().startswith('--workers')]


@pytest.mark.parametrize('given', [['-j', '8'], ['--workers', '8'], ['-c', 'CONFIG']])
def test_a_value_given_is_kept(two_cpus, caplog, tmp_path, given):
    config = tmp_path / 'eval.yaml'
    config.write_text('workers: 8\n')
    with caplog.at_level(logging.INFO):
        args = validate_adv.parse_args(VALIDATE + [str(config) if a == 'CONFIG' else a for a in given])
    assert args.workers == 8
    assert not [r for r in caplog.records if r.getMessage().startswith('--workers')]


def test_train_records_the_workers_it_used(monkeypatch):
    monkeypatch.setattr(usage, 'available_cpus', lambda: 1)
    args, text = train_adv.parse_args(['--dataset', 'digits'])
    assert args.workers == 1 and 'workers: 1\n' in text
