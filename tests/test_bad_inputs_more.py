"""More of the catalogue of bad input (`test_bad_inputs.py`): weights holding NaN, attacks that would not attack,
devices this machine lacks, input shapes and model arguments the model does not take. Every case exits with status
2, says what is wrong on one line of stderr, shows no traceback and creates or changes no file.
"""
import logging
import math
from pathlib import Path
from typing import List

import pytest
import timm
import torch

from test_bad_inputs import COMMANDS, Case, Context, _snapshot
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.convert.common import load_exactly
from timm_advnorm.hub import create_model_from_name_or_checkpoint, write_export

NUM_CLASSES = 10  # the digits'


def _nan_model() -> torch.nn.Module:
    """A digits-sized test_mbn_resnet whose first BN weight holds a NaN and whose classifier bias an inf."""
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if 'bn' in name).view(-1)[0] = math.nan
        model.get_classifier().bias[0] = math.inf
    return model


def _nan_checkpoint(tmp: Path, training: bool = False) -> Path:
    """A checkpoint of `_nan_model`: a state dict, or a training checkpoint as timm's saver writes one."""
    state_dict = _nan_model().state_dict()
    path = tmp / ('last.pth.tar' if training else 'nan.pth')
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=state_dict) if training else state_dict, path)
    return path


def _nan_export(tmp: Path) -> Path:
    """An export folder (config.json + model.safetensors) of `_nan_model`."""
    folder = tmp / 'export'
    folder.mkdir()
    write_export(_nan_model(), folder)
    return folder


NAN = '2 tensors hold NaN or inf values (first: '
NONFINITE_WEIGHT_CASES: List[Case] = [
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--checkpoint', _nan_checkpoint(tmp)),
     f'nan.pth: {NAN}'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', f'local-dir:{_nan_export(tmp)}'), NAN),
    ('train', lambda tmp, ctx: ctx.train('--initial-checkpoint', _nan_checkpoint(tmp)), f'nan.pth: {NAN}'),
    ('train', lambda tmp, ctx: ctx.train('--resume', _nan_checkpoint(tmp, training=True)), f'last.pth.tar: {NAN}'),
    ('publish', lambda tmp, ctx: [_nan_checkpoint(tmp), '--model', 'test_mbn_resnet', '--inference-branch', 'clean',
                                  '--local-dir', tmp / 'out'], f'nan.pth: {NAN}'),
]
NO_OP_ATTACK_CASES: List[Case] = [
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-steps',
                                               '0'), '--attack-steps takes distinct counts >= 1'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'pgd', '--attack-steps',
                                               '0', '2'), '0 iterations attack nothing'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attacks', 'cw-linf',
                                               '--attack-kwargs', 'steps=0'), 'CW-L∞ needs steps >= 1'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', ctx.digits_dir,
                                   '--protocol', 'nofrost', '--attack-steps', '0', '--results-file',
                                   ctx.out / 'r.json'], '--attack-steps takes distinct counts >= 1'),
]
_NO_CUDA = [] if torch.cuda.is_available() else [
    ('train', lambda tmp, ctx: ctx.train('--device', 'cuda'), '--device cuda: no CUDA device'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--device', 'cuda'),
     '--device cuda: no CUDA device')]
_NO_MPS = [] if torch.backends.mps.is_available() else [
    ('train', lambda tmp, ctx: ctx.train('--device', 'mps'), '--device mps: no mps device'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--device', 'mps'),
     '--device mps: no mps device')]
SETUP_CASES: List[Case] = _NO_CUDA + _NO_MPS + [
    ('train', lambda tmp, ctx: ctx.train('--device', 'meta'), '--device meta: meta tensors hold no values'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--device', 'meta'),
     '--device meta: meta tensors hold no values'),
    ('train', lambda tmp, ctx: ctx.train('--input-size', '1', '16', '16'),
     '--input-size 1 16 16: 1 channel(s), but the model takes 3'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--input-size', '1', '16', '16'),
     '--input-size 1 16 16: 1 channel(s), but the model takes 3'),
    ('train', lambda tmp, ctx: ctx.train('--input-size', '16', '16'), 'argument --input-size: expected 3 arguments'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--input-size', '16', '16'),
     'argument --input-size: expected 3 arguments'),
    ('train', lambda tmp, ctx: ctx.train('--mean', '0.5', '0.5'),
     '--mean takes 1 value or one per input channel (3), got 2'),
    ('train', lambda tmp, ctx: ctx.train('--std', '0.2', '0.2', '0.2', '0.2'),
     '--std takes 1 value or one per input channel (3), got 4'),
    ('train', lambda tmp, ctx: ctx.train('--aa', 'bogus'), '--aa bogus: Unknown AA policy bogus'),
    ('train', lambda tmp, ctx: ctx.train('--model-kwargs', 'bogus=1'),
     "test_mbn_resnet takes no model argument 'bogus'"),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--model-kwargs', 'bogus=1'),
     "test_mbn_resnet takes no model argument 'bogus'"),
]

CASES = NONFINITE_WEIGHT_CASES + NO_OP_ATTACK_CASES + SETUP_CASES


@pytest.fixture(autouse=True)
def _own_log_handlers():
    """The commands set up logging on first use; handlers bound to a test's captured stream must not outlive it."""
    handlers = list(logging.root.handlers)
    yield
    logging.root.handlers[:] = handlers


@pytest.mark.parametrize('case', CASES, ids=[f'{c[0]}-{c[2][:40]}' for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    command, build, message = case
    run, prog = COMMANDS[command]
    ctx = Context(digits_dir=digits_dir, out=tmp_path / 'out')
    argv = [str(a) for a in build(tmp_path, ctx)]
    before, digits_before = _snapshot(tmp_path), _snapshot(digits_dir)
    capsys.readouterr()
    try:
        status = run(prog, argv)
    except SystemExit as e:  # argparse's usage errors exit from inside
        status = e.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if 'error' in line.lower()]
    assert status == 2, err
    assert 'Traceback' not in err, err
    assert len(errors) == 1 and errors[0].startswith(f'{prog}: error:'), err
    assert message in errors[0], errors[0]
    assert _snapshot(tmp_path) == before, 'bad input must not create or change a file'
    assert _snapshot(digits_dir) == digits_before


def test_the_python_loader_refuses_nonfinite_weights(tmp_path):
    with pytest.raises(ValueError, match=f'nan.pth: {NAN.replace("(", "[(]")}'):
        create_model_from_name_or_checkpoint('test_mbn_resnet', _nan_checkpoint(tmp_path))
    with pytest.raises(ValueError, match='NaN or inf'):
        create_model_from_name_or_checkpoint(f'local-dir:{_nan_export(tmp_path)}', pretrained=True)


def test_a_conversion_refuses_nonfinite_weights():
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match=r'release.pth: 2 tensors hold NaN or inf'):
        load_exactly(model, _nan_model().state_dict(), 'release.pth')


@pytest.mark.parametrize('name, budget, message', [
    ('pgd', dict(steps=0), 'PGD needs steps >= 1'),
    ('cw-linf', dict(steps=0), 'CW-L∞ needs steps >= 1'),
    ('square', dict(n_queries=0), 'n_queries >= 2'),
    ('apgd-ce', dict(steps=0), 'steps >= 1'),
])
def test_attacks_refuse_a_budget_that_attacks_nothing(name, budget, message):
    with pytest.raises(ValueError, match=message):
        create_attack(name, space=InputSpace(), **budget)


def test_an_attack_of_eps_0_stays_allowed():
    """ε = 0 is the clean point of an ε sweep, and its results say ε = 0: it reports nothing false."""
    assert create_attack('pgd', space=InputSpace(), eps=0.0, steps=1).eps == 0.0
