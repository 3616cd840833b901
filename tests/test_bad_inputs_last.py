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
from timm_advnorm.data import BUILTIN_DATASETS
from timm_advnorm.data.names import check_dataset_name
from timm_advnorm.arg_types import pixel_budget, pixel_step, positive_pixel_step

FRACTION_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ctx.train('--attack-eps', '8/255'),
     'argument --attack-eps: 8/255 looks like a fraction of the [0, 1] scale; budgets are on the 0-255 scale: '
     'give 8'),
    ('train', lambda tmp, ctx: ctx.train('--attack-step', '2/255'),
     'argument --attack-step: 2/255 looks like a fraction of the [0, 1] scale; steps are on the 0-255 scale: give 2'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-eps', '4/255'), 'budgets are on the 0-255 scale: give 4'),
    ('train', lambda tmp, ctx: ctx.train('--val-attack-step', '1/255'), 'steps are on the 0-255 scale: give 1'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('attack_eps: 8/255\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
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
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'digts'), '--dataset digts: unknown dataset; did you mean digits?'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'nosuchset'), f'--dataset nosuchset: unknown dataset. {_TAKES}'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'MNIST5k'), 'did you mean mnist5k'),
    ('train', lambda tmp, ctx: ctx.train('--dataset', 'tfsd/beans'), 'did you mean tfds/beans or hfds/beans?'),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('dataset: digts\n'), ctx.train('-c', tmp / 'c.yaml'))[-1],
     '--dataset digts: unknown dataset; did you mean digits?'),
    ('validate', lambda tmp, ctx: ['--model', 'test_mbn_resnet', '--dataset', 'digts'],
     '--dataset digts: unknown dataset; did you mean digits?'),
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

CASES = FRACTION_CASES + DATASET_NAME_CASES + DATA_DIR_CASES


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
