"""The last classes of bad input (issue #38): errors that name both sides of a mismatch, budgets written as fractions,
dataset names resolved strictly, built-in data never rendered into a folder given as input, long key lists said
in a few names. Each case exits with status 2, says what is wrong on one line of stderr, shows no traceback and
creates or changes no file (`test_bad_inputs.check_refused`).
"""
from pathlib import Path
from typing import List

import pytest
import timm
import torch

from test_bad_inputs import Case, case_id, check_refused
from timm_advnorm.commands.train import parse_invocation
from timm_advnorm.data import BUILTIN_DATASETS, resolve_dataset
from timm_advnorm.data.names import check_dataset_name
from timm_advnorm.arg_types import pixel_budget, pixel_step, positive_pixel_step
from timm_advnorm.hub import load_weights
from timm_advnorm.messages import counted_names

FRACTION_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('--attack-eps', '8/255'),
     'argument --attack-eps: 8/255 looks like a fraction of the [0, 1] scale; budgets are on the 0-255 scale: '
     'give 8'),
    ('train', lambda tmp, ctx: ctx.train('--attack-step', '2/255'),
     'argument --attack-step: 2/255 looks like a fraction of the [0, 1] scale; steps are on the 0-255 scale: give 2'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-eps', '4/255'), 'budgets are on the 0-255 scale: give 4'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-step', '1/255'), 'steps are on the 0-255 scale: give 1'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack_eps: 8/255\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1],
     '8/255 looks like a fraction of the [0, 1] scale; budgets are on the 0-255 scale: give 8'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--attack-eps', '16/255'),
     'argument --attack-eps: 16/255 looks like a fraction of the [0, 1] scale; budgets are on the 0-255 scale: '
     'give 16'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--eps', '8/255'),
     'argument --eps: 8/255 looks like a fraction'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--step', '0.5 / 255'),
     'argument --step: 0.5 / 255 looks like a fraction of the [0, 1] scale; steps are on the 0-255 scale: give 0.5'),
]

_TAKES = "--dataset takes digits, mnist5k, mnist (built in), a timm dataset (torch/NAME, hfds/NAME, hfids/NAME, "
DATASET_NAME_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'digts'),
     '--dataset digts: unknown dataset; did you mean digits?'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'nosuchset'), f'--dataset nosuchset: unknown dataset. {_TAKES}'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'MNIST5k'), 'did you mean mnist5k'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'tfsd/beans'), 'did you mean tfds/beans or hfds/beans?'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('dataset: digts\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     '--dataset digts: unknown dataset; did you mean digits?'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'digts'],
     '--dataset digts: unknown dataset; did you mean digits?'),
    ('train', lambda tmp, ctx: ctx.train('--model', 'test_mbn_resnt'),
     "Unknown model 'test_mbn_resnt': not registered with timm (did you mean test_mbn_resnet"),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'nosuchset', '--data-dir',
                                   ctx.digits_dir], f'--dataset nosuchset: unknown dataset. {_TAKES}'),
]



def _image_folder(tmp: Path) -> Path:
    """A folder of the user's (an image folder with a validation split): what no command may write into."""
    (tmp / 'mine' / 'validation' / '0').mkdir(parents=True)
    (tmp / 'mine' / 'train' / '0').mkdir(parents=True)
    return tmp / 'mine'


def _digits_checkpoint(tmp: Path) -> Path:
    """A training checkpoint whose run records ``--dataset digits`` (and no data folder: the cache)."""
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=model.state_dict(),
                    args=dict(method='pgd', model='test_mbn_resnet', dataset='digits')), tmp / 'last.pth.tar')
    return tmp / 'last.pth.tar'


_NOT_WRITTEN = "holds no rendered copy of it (digits-32px/); nothing is written into a folder given as input: pass " \
               "--dataset '' to read the image folder "
DATA_DIR_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('--data-dir', _image_folder(tmp)),
     f'the dataset is digits (the default of --dataset), built in, and the folder {_NOT_WRITTEN}'),
    ('validate', lambda tmp, ctx: ['--checkpoint', _digits_checkpoint(tmp), '--data-dir', _image_folder(tmp),
                                   '--num-samples', '4', '--attacks', 'fgsm', '--sanity-samples', '0', '--workers', '0',
                                   '--results-file', ctx.out / 'r.json'],
     f"the dataset is digits (the checkpoint's record), built in, and the folder {_NOT_WRITTEN}"),
]



def _plain_checkpoint(tmp: Path) -> Path:
    """A training checkpoint of a plain-BN test_resnet (10 classes)."""
    model = timm.create_model('test_resnet', num_classes=10)
    torch.save(dict(epoch=0, arch='test_resnet', state_dict=model.state_dict(),
                    args=dict(method='pgd', model='test_resnet', dataset='digits')), tmp / 'plain.pth.tar')
    return tmp / 'plain.pth.tar'


def _binary(tmp: Path) -> Path:
    (tmp / 'card.md').write_bytes(b'\x98\x00\xff binary')
    return tmp / 'card.md'


_CLASH = 'last.pth.tar holds test_mbn_resnet weights (10 classes) but the model is test_vit (1000 classes): build it ' \
         'as test_mbn_resnet (--model test_mbn_resnet, or no --model: the checkpoint names it)'
_NO_BRANCH = ('--branch: test_resnet has no mixture BN (one set of batch-norm statistics), so --branch does not '
              'apply; drop it')
MISMATCH_CASES: List[Case] = [
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_vit', '--checkpoint', _digits_checkpoint(tmp)), _CLASH),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--model', 'test_vit', '--local-dir', tmp / 'x'], _CLASH),
    ('train', lambda tmp, ctx: ctx.train('--model', 'test_efficientnet', '--initial-checkpoint',
                                         _digits_checkpoint(tmp)),
     'last.pth.tar holds test_mbn_resnet weights (10 classes) but the model is test_efficientnet (10 classes)'),
    ('validate', lambda tmp, ctx: ctx.validate('--checkpoint', _plain_checkpoint(tmp), '--branch', 'adv'), _NO_BRANCH),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_resnet', '--checkpoint', _plain_checkpoint(tmp),
                                               '--branch', 'adv'),
     '--branch adv: the checkpoint has no mixture BN (one set of batch-norm statistics), so --branch does not apply'),
    ('publish', lambda tmp, ctx: [_plain_checkpoint(tmp), '--branch', 'adv', '--local-dir', tmp / 'x'], _NO_BRANCH),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--model', 'test_resnet', '--local-dir', tmp / 'x'],
     'the checkpoint has mixture BN and the model (test_resnet) plain BN: pass --branch clean or --branch adv'),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--inference-branch', 'clean', '--card-template',
                                  _binary(tmp), '--local-dir', tmp / 'x'],
     'card.md: not UTF-8 text (byte 0 is 0x98); give a model card template (Markdown text)'),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--inference-branch', 'clean', '--card-template', tmp,
                                  '--local-dir', tmp / 'x'], 'a folder, not a file; give a model card template'),
    ('convert', lambda tmp, ctx: ['fast-advprop', tmp, tmp / 'x'],
     'is a folder; fast-advprop converts one file: checkpoint saved by fast_advprop/imagenet.py (.pth.tar)'),
    ('convert', lambda tmp, ctx: ['nofrost', tmp, tmp / 'x'],
     'is a folder; nofrost converts one file: best_RA.pth, best_SA.pth or latest.pth'),
    ('convert', lambda tmp, ctx: ['tensorpack-resnet', tmp, tmp / 'x'], 'is a folder; tensorpack-resnet converts one'),
    ('train', lambda tmp, ctx: ctx.train('--resume', tmp), 'is a folder: give the checkpoint file to resume from'),
    ('validate', lambda tmp, ctx: ctx.validate('--checkpoint', _digits_checkpoint(tmp), '--num-classes', '3'),
     'last.pth.tar has 10 classes but num_classes=3 was requested (--num-classes): drop it, the checkpoint sets'),
    ('publish', lambda tmp, ctx: [_digits_checkpoint(tmp), '--use-ema', '--local-dir', tmp / 'x'],
     'holds no EMA weights (no "state_dict_ema"): drop --use-ema'),
    ('train', lambda tmp, ctx: ctx.train('--class-map', _binary(tmp)),
     'card.md: not UTF-8 text (byte 0 is 0x98); give a text file of class names, one per line (or a .pkl class map)'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--class-map', _binary(tmp)),
     'card.md: not UTF-8 text (byte 0 is 0x98)'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--class-map', tmp),
     'a folder, not a file; give a text file of class names'),
]

CASES = FRACTION_CASES + DATASET_NAME_CASES + DATA_DIR_CASES + MISMATCH_CASES


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    check_refused(case, digits_dir, tmp_path, capsys)


@pytest.mark.parametrize('kind', [pixel_budget, pixel_step, positive_pixel_step])
@pytest.mark.parametrize('text, meant', [('8/255', '8'), ('8 / 255', '8'), ('.5/255', '0.5'), ('1/8', '32')])
def test_every_budget_type_reads_a_fraction_as_the_0_255_value_it_means(kind, text, meant):
    with pytest.raises(Exception, match=rf'looks like a fraction of the \[0, 1\] scale; \w+ are on the 0-255 scale: '
                                        rf'give {meant}$'):
        kind(text)


@pytest.mark.parametrize('name', ['', 'digits', 'mnist', 'torch/cifar10', 'HFDS/beans', 'tfds/mnist', 'wds/x'])
def test_known_dataset_names_and_folders_pass(name, tmp_path):
    check_dataset_name(name, BUILTIN_DATASETS)
    check_dataset_name(str(tmp_path), BUILTIN_DATASETS)  # a folder named as the dataset: timm reads it as one


def test_long_key_lists_are_counted_and_cut_to_a_few_names():
    keys = [f'layer1.{i}.conv1.weight' for i in range(412)]
    assert counted_names(keys, 'unexpected key') == (
        '412 unexpected keys (layer1.0.conv1.weight, layer1.1.conv1.weight, layer1.2.conv1.weight and 409 more)')
    assert counted_names(keys[:1], 'missing key') == '1 missing key (layer1.0.conv1.weight)'
    assert counted_names([], 'missing key') == 'no missing keys'


def test_weights_that_do_not_fit_say_what_differs_in_a_few_names():
    """A bare state dict records no architecture: the keys that differ are summarized, not listed by the hundred."""
    weights = timm.create_model('test_efficientnet', num_classes=10).state_dict()
    with pytest.raises(ValueError) as error:
        load_weights(timm.create_model('test_vit', num_classes=10), weights)
    message = str(error.value)
    assert message.startswith('state dict has no classifier "head.weight", which the model (test_vit, 10 classes) has')
    with pytest.raises(ValueError, match=r'^the checkpoint has mixture BN and the model \(test_vit\) plain BN, and not '
                                         r'even one branch fits it \(\d+ missing keys \(cls_token, pos_embed, '):
        load_weights(timm.create_model('test_vit', num_classes=10),
                     timm.create_model('test_mbn_resnet', num_classes=10).state_dict())
    weights.update({'fc.weight': torch.zeros(10, 64), 'fc.bias': torch.zeros(10)})
    with pytest.raises(ValueError, match=r'^state dict does not fit test_resnet: \d+ missing keys \(conv1.0.weight, '
                                         r'conv1.1.weight, conv1.1.bias and \d+ more\); \d+ unexpected keys \(conv_stem'
                                         r'.weight, .* and \d+ more\); 5 mis-shaped keys \(bn1.weight 24 vs 32, '
                                         r'bn1.bias 24 vs 32 and 3 more\)$') as error:
        load_weights(timm.create_model('test_resnet', num_classes=10), weights)
    assert len(str(error.value)) < 400


def test_only_a_dataset_given_is_rendered_into_the_data_dir(tmp_path):
    """What chose the dataset of a training run, for `data.resolve_dataset`: None (given: it may be rendered into
    ``--data-dir``), the default, or a resumed run's record read with another ``--data-dir`` than the run's."""
    checkpoint, folder = str(_digits_checkpoint(tmp_path)), str(_image_folder(tmp_path))
    chosen = {tuple(argv): parse_invocation(argv, 'train')[2] for argv in (
        ['--data-dir', folder], ['--dataset', 'digits', '--data-dir', folder], ['--resume', checkpoint],
        ['--resume', checkpoint, '--data-dir', folder], ['--resume', checkpoint, '--dataset', 'digits', '--data-dir',
                                                         folder])}
    assert list(chosen.values()) == ['the default of --dataset', None, None, "the resumed run's record", None]
    with pytest.raises(ValueError, match=r"the dataset is digits \(the resumed run's record\), built in, and the "
                                         r"folder holds no rendered copy"):
        resolve_dataset('digits', folder, chosen_by="the resumed run's record")
    assert sorted(p.name for p in Path(folder).iterdir()) == ['train', 'validation']  # nothing written into it
