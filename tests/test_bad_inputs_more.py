"""More of the catalogue of bad input (`test_bad_inputs.py`): weights holding NaN, attacks that would not attack,
devices this machine lacks, input shapes and model arguments the model does not take, results of other weights given
to publishing. Every case exits with status 2, says what is wrong on one line of stderr, shows no traceback and
creates or changes no file. Then what publishing does with results of the weights it exports, and of others.
"""
import argparse
import json
import math
from pathlib import Path
from typing import List

import pytest
import timm
import torch
from huggingface_hub import ModelCard
from test_bad_inputs import Case, case_id, check_refused

from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.augment.deepaugment import build_net, load_deepaugment_weights
from timm_advnorm.commands.publish import run as run_publish
from timm_advnorm.commands.validate import run as run_validate
from timm_advnorm.convert.common import load_exactly
from timm_advnorm.hub import create_model_from_name_or_checkpoint, write_export
from timm_advnorm.weights.digest import branch_digests, state_dict_digest

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


def _checkpoint_and_results(tmp: Path, **recorded: str) -> Path:
    """A training checkpoint of a random test_mbn_resnet and, in ``r.json``, results recording `recorded`."""
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=model.state_dict()), tmp / 'last.pth.tar')
    (tmp / 'r.json').write_text(json.dumps(dict(
        model='test_mbn_resnet', protocol=dict(name='custom'), checkpoint='elsewhere.pth.tar', **recorded,
        variants=[dict(name='clean', clean=50.0, attacks=[dict(label='fgsm', accuracy=25.0)])])))
    return tmp / 'last.pth.tar'


OTHER_RESULTS_CASES: List[Case] = [
    ('publish', lambda tmp, ctx: [_checkpoint_and_results(tmp), '--inference-branch', 'clean', '--results',
                                  tmp / 'r.json', '--local-dir', tmp / 'out'],
     'r.json does not record which weights it evaluated (results that predate weight digests'),
    ('publish', lambda tmp, ctx: [_checkpoint_and_results(tmp, weights_digest='0' * 64), '--inference-branch',
                                  'clean', '--results', tmp / 'r.json', '--local-dir', tmp / 'out'],
     'r.json evaluated other weights (elsewhere.pth.tar, digest 000000000000) than those published'),
]

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
                                               '--attack-kwargs', 'steps=0'),
     '--attack-kwargs steps=0: steps is set by --attack-steps, not by --attack-kwargs'),
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
     "input size 1 16 16 (--input-size, else the model's) has 1 channel(s), but the model takes 3"),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--input-size', '1', '16', '16'),
     "input size 1 16 16 (--input-size, else the model's) has 1 channel(s), but the model takes 3"),
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

CASES = NONFINITE_WEIGHT_CASES + NO_OP_ATTACK_CASES + SETUP_CASES + OTHER_RESULTS_CASES


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    check_refused(case, digits_dir, tmp_path, capsys)


def test_the_python_loader_refuses_nonfinite_weights(tmp_path):
    with pytest.raises(ValueError, match=f'nan.pth: {NAN.replace("(", "[(]")}'):
        create_model_from_name_or_checkpoint('test_mbn_resnet', _nan_checkpoint(tmp_path))
    with pytest.raises(ValueError, match='NaN or inf'):
        create_model_from_name_or_checkpoint(f'local-dir:{_nan_export(tmp_path)}', pretrained=True)


def test_a_conversion_refuses_nonfinite_weights():
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match=r'release.pth: 2 tensors hold NaN or inf'):
        load_exactly(model, _nan_model().state_dict(), 'release.pth')


def test_deepaugment_refuses_nonfinite_network_weights(tmp_path):
    state = build_net('cae').state_dict()
    state['e_conv_1.1.weight'][0] = math.inf
    torch.save(state, tmp_path / 'model_final.state')
    with pytest.raises(ValueError, match=r'model_final.state: 1 tensor holds NaN or inf values \(first: e_conv_1.1'):
        load_deepaugment_weights('cae', tmp_path / 'model_final.state')


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


@pytest.fixture(scope='module')
def evaluated(tmp_path_factory, digits_dir):
    """A checkpoint of a mixture-BN model with distinct branches and EMA weights, and validate_adv.py's results of
    its weights (the whole model, both branches evaluated)."""
    folder = tmp_path_factory.mktemp('evaluated')
    torch.manual_seed(0)
    model, ema = (timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES) for _ in range(2))
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, 'adv_bn'):
                module.adv_bn.weight.uniform_(0.5, 1.5)
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=model.state_dict(), state_dict_ema=ema.state_dict(),
                    args=dict(model='test_mbn_resnet', num_classes=NUM_CLASSES)), folder / 'last.pth.tar')
    assert _validate(digits_dir, '--checkpoint', folder / 'last.pth.tar', '--results-file', folder / 'r.json') == 0
    return argparse.Namespace(checkpoint=folder / 'last.pth.tar', results=folder / 'r.json', model=model)


def _validate(digits_dir: Path, *argv) -> int:
    return run_validate('validate_adv.py', [str(a) for a in (
        '--dataset', 'digits', '--data-dir', digits_dir, '--num-samples', '8', '--workers', '0', '--sanity-samples',
        '0', '--no-progress', '--attacks', 'fgsm', *argv)])


def _publish(*argv) -> int:
    return run_publish('hub/publish.py', [str(a) for a in argv])


def _evaluation(folder: Path) -> str:
    """The card's evaluation section."""
    return (folder / 'README.md').read_text(encoding='utf-8').split('## Evaluation', 1)[1]


def test_results_record_the_digests_of_the_weights_they_evaluated(evaluated):
    results = json.loads(evaluated.results.read_text())
    assert results['weights_digest'] == state_dict_digest(evaluated.model.state_dict())
    assert results['branch_weights_digests'] == branch_digests(evaluated.model)
    assert len(set(results['branch_weights_digests'].values()) | {results['weights_digest']}) == 3


@pytest.mark.parametrize('which', [['--inference-branch', 'adv'], ['--branch', 'adv'], ['--branch', 'clean']])
def test_results_of_the_published_weights_are_published_without_a_word(evaluated, tmp_path, which):
    assert _publish(evaluated.checkpoint, *which, '--results', evaluated.results, '--local-dir', tmp_path / 'out') == 0
    evaluation = _evaluation(tmp_path / 'out')
    assert 'other weights' not in evaluation and '| fgsm |' in evaluation


def test_an_export_evaluates_to_the_digest_its_publishing_checked(evaluated, digits_dir, tmp_path):
    """Publish the adversarial branch as a plain model, evaluate the export: its results bind to the export (and to
    that branch of the checkpoint), so they publish the export again."""
    assert _publish(evaluated.checkpoint, '--branch', 'adv', '--local-dir', tmp_path / 'export') == 0
    assert _validate(digits_dir, '--model', f'local-dir:{tmp_path / "export"}', '--results-file',
                     tmp_path / 'r.json') == 0
    recorded = json.loads((tmp_path / 'r.json').read_text())['weights_digest']
    assert recorded == branch_digests(evaluated.model)['adv']
    assert _publish(tmp_path / 'export', '--results', tmp_path / 'r.json', '--local-dir', tmp_path / 'again') == 0


def test_results_of_other_weights_need_a_flag_and_the_card_says_so(evaluated, tmp_path, capsys):
    argv = [evaluated.checkpoint, '--use-ema', '--inference-branch', 'adv', '--results', evaluated.results,
            '--local-dir', tmp_path / 'out']
    assert _publish(*argv) == 2 and 'evaluated other weights' in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()
    assert _publish(*argv, '--allow-other-results') == 0
    evaluation = _evaluation(tmp_path / 'out')
    assert evaluation.index('**These numbers were measured on other weights.**') < evaluation.index('| fgsm |')
    names = [result.metric_name for result in ModelCard((tmp_path / 'out' / 'README.md').read_text()).data.eval_results]
    assert names and all(name.endswith(' (measured on other weights)') for name in names)


def test_results_that_record_no_weights_need_the_flag_and_the_card_says_so(evaluated, tmp_path):
    results = json.loads(evaluated.results.read_text())
    del results['weights_digest'], results['branch_weights_digests']  # as written before the digests were
    (tmp_path / 'old.json').write_text(json.dumps(results))
    argv = [evaluated.checkpoint, '--inference-branch', 'adv', '--results', tmp_path / 'old.json', '--local-dir',
            tmp_path / 'out']
    assert _publish(*argv) == 2
    assert _publish(*argv, '--allow-other-results') == 0
    assert '**These numbers may describe other weights.**' in _evaluation(tmp_path / 'out')
    names = [result.metric_name for result in ModelCard((tmp_path / 'out' / 'README.md').read_text()).data.eval_results]
    assert names and all(name.endswith(' (weights not verified)') for name in names)
