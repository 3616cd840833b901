"""The catalogue of bad input (`test_bad_inputs.py`), continued for three classes that used to get through:

* paths that leave where the user pointed or that the file system cannot hold: an ``--experiment`` that is not one
  folder name, a name longer than ``NAME_MAX``, an output on a pseudo file system, for every command that writes;
* YAML read loosely: a key given twice, a recursive anchor, in every YAML file a command reads;
* inputs of valid types that are no valid run: an image smaller than the model's stem, mixture-BN options given to a
  model without mixture BN, interpolations without an interior γ; and the warnings of what is allowed but misleads
  (validating on the training split, options the method does not use).

Every refusal exits with status 2, says what is wrong on one line and creates no file or folder.
"""
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest
import timm
from test_bad_inputs import Case, case_id, check_refused

from timm_advnorm.commands.deepaugment import run as run_deepaugment
from timm_advnorm.commands.demo import run as run_demo
from timm_advnorm.commands.study import run as run_study
from timm_advnorm.commands.train import parse_args as parse_train_args
from timm_advnorm.data.preprocessing import minimum_image_size
from timm_advnorm.eval.options import EvalDataOptions
from timm_advnorm.eval.recorded import DataRecord
from timm_advnorm.eval.run.build import _warn_training_split
from timm_advnorm.strict_yaml import YAMLFileError, load_yaml
from timm_advnorm.study.spec import load_study
from timm_advnorm.train.checks import check_validation_split
from timm_advnorm.train.run_folder import open_run_folder
from timm_advnorm.write_guard import WriteError, check_folder_name, check_names

LONG = 'a' * 300  # longer than any common file system's NAME_MAX (255)
TOO_LONG = 'bytes long, but the file system there allows at most'
PROC = Path('/proc')
_PSEUDO = [] if not PROC.is_dir() else [
    ('train', lambda tmp, ctx: [*ctx.train(), '--output', '/proc/run'], 'is on a pseudo file system'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--results-file', '/proc/r.json'),
     'cannot write into /proc: /proc is on a pseudo file system'),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--local-dir', '/proc/export'], 'is on a pseudo file system'),
    ('convert', lambda tmp, ctx: ['nofrost', tmp / 'missing.pth', '/proc/export'], 'is on a pseudo file system'),
]
PATH_CASES: List[Case] = _PSEUDO + [
    ('train', lambda tmp, ctx: ctx.train('--experiment', '../escaped'),
     '--experiment ../escaped: must be one folder name, made inside --output'),
    ('train', lambda tmp, ctx: ctx.train('--experiment', str(tmp / 'abs')), 'must be one folder name'),
    ('train', lambda tmp, ctx: ctx.train('--experiment', 'a/b'), 'must be one folder name'),
    ('train', lambda tmp, ctx: ctx.train('--experiment', '..'), 'must be one folder name'),
    ('train', lambda tmp, ctx: ctx.train('--experiment', LONG), TOO_LONG),
    ('train', lambda tmp, ctx: [*ctx.train(), '--output', tmp / LONG / 'runs'], TOO_LONG),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--results-file', tmp / f'{LONG}.json'),
     TOO_LONG),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--results-file',
                                               tmp / f'{"a" * 250}.json'), 'for the temporary name'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--plot-dir', tmp / LONG), TOO_LONG),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--resume-state', tmp / 's' / LONG),
     TOO_LONG),
    ('publish', lambda tmp, ctx: [tmp / 'last.pth.tar', '--local-dir', tmp / 'out' / LONG], TOO_LONG),
    ('convert', lambda tmp, ctx: ['nofrost', tmp / 'missing.pth', tmp / LONG], TOO_LONG),
]
YAML_CASES: List[Case] = [
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('epochs: 90\nlr: 0.1\nepochs: 1\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1],
     "c.yaml is not valid YAML: key 'epochs' appears twice (first on line 1); give each key once (line 3, column 1)"),
    ('train', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('model_kwargs: &a {x: *a}\n'),
                                ctx.train('-c', tmp / 'c.yaml'))[-1],
     "c.yaml is not valid YAML: an alias under key 'x' refers to a collection that contains it (a recursive anchor)"),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('gammas: [0]\nmodel: test_mbn_resnet\ngammas: [1]\n'),
                                   ctx.validate('-c', tmp / 'c.yaml'))[-1], "key 'gammas' appears twice"),
    ('validate', lambda tmp, ctx: ((tmp / 'c.yaml').write_text('mean: &m [0.5, *m]\n'),
                                   ctx.validate('--model', 'test_mbn_resnet', '-c', tmp / 'c.yaml'))[-1],
     "an alias under key 'mean' refers to a collection that contains it"),
]
RUN_CASES: List[Case] = [
    # the digits would be rendered at 1 px into --data-dir first: the model's check comes before (no file written)
    ('train', lambda tmp, ctx: ctx.train('--img-size', '1'),
     'the image size 1x1 (--img-size or --input-size, else the model\'s) is below the minimum of test_mbn_resnet, '
     '2 px'),
    ('train', lambda tmp, ctx: ctx.train('--input-size', '3', '32', '1'), 'is below the minimum of test_mbn_resnet'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--img-size', '1'),
     'give --img-size 2 or more'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_resnet', '--num-classes', '10', '--gammas', '0', '1'),
     '--gammas: the model has no mixture BN'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_resnet', '--num-classes', '10', '--interpolations',
                                               'mix'), '--interpolations: the model has no mixture BN'),
    ('validate', lambda tmp, ctx: ctx.validate('--model', 'test_mbn_resnet', '--gammas', '0', '1', '--interpolations',
                                               'logits'),
     '--interpolations apply at gammas strictly between 0 and 1; --gammas 0 1 has none'),
]
CASES = PATH_CASES + YAML_CASES + RUN_CASES


@pytest.mark.parametrize('case', CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_is_one_line_status_2_and_writes_nothing(case, digits_dir, tmp_path, capsys):
    check_refused(case, digits_dir, tmp_path, capsys)


@pytest.mark.parametrize('command, argv', [
    (run_deepaugment, lambda tmp: [tmp, tmp.parent / f'{tmp.name}-out' / LONG, '--net', 'cae',
                                   '--allow-random-weights', '--device', 'cpu']),
    (run_study, lambda tmp: ['xie2020', '--output', tmp / LONG]),
    (run_demo, lambda tmp: ['--output', tmp / 'demo' / LONG]),
], ids=['deepaugment', 'study', 'demo'])
def test_the_other_writing_commands_refuse_a_name_too_long_before_writing(command, argv, tmp_path, capsys):
    (tmp_path / 'src').mkdir()
    before = sorted(tmp_path.parent.iterdir())
    assert command('prog', [str(a) for a in argv(tmp_path / 'src')]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('prog: error: cannot write') and TOO_LONG in err[0], err
    assert sorted(tmp_path.parent.iterdir()) == before and list(tmp_path.iterdir()) == [tmp_path / 'src']


def test_a_folder_name_is_one_component():
    for name in ('run', 'run-1', 'a.b', '...'):
        check_folder_name(name, '--experiment', 'out', '--output')
    for name in ('../x', 'x/..', '/abs', '.', '..', 'a/b', 'a\0b'):
        with pytest.raises(ValueError, match='must be one folder name'):
            check_folder_name(name, '--experiment', 'out', '--output')


def test_names_are_checked_against_the_file_system_limit(tmp_path):
    limit = os.pathconf(tmp_path, 'PC_NAME_MAX')
    check_names(tmp_path / ('a' * limit))
    with pytest.raises(ValueError, match=f'is {limit + 1} bytes long, but the file system there allows at most '
                                         f'{limit}; choose a shorter name'):
        check_names(tmp_path / 'new' / ('a' * (limit + 1)) / 'x')
    with pytest.raises(ValueError, match=f'at most {limit - 10} \\({limit} less 10 for the temporary name'):
        check_names(tmp_path / ('a' * limit), reserve=10)
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_that_cannot_be_made_leaves_no_parent_behind(tmp_path):
    with pytest.raises(WriteError, match='cannot write .*: a name in the path is longer than the file system allows'):
        open_run_folder(str(tmp_path / 'a' / 'b'), LONG, '', 'epochs: 1\n', 0)
    assert list(tmp_path.iterdir()) == []


# YAML: one strict reader for every file


@pytest.mark.parametrize('text, message', [
    ('a: 1\nb: 2\na: 3\n', "key 'a' appears twice (first on line 1); give each key once (line 3, column 1)"),
    ('outer:\n  x: 1\n  x: 2\n', "key 'x' appears twice (first on line 2)"),
    ('a: &x [1, *x]\n', "an alias under key 'a' refers to a collection that contains it (a recursive anchor)"),
    ('- &x {b: [*x]}\n', "an alias under key 'b' refers to a collection that contains it"),
    ('a: [\n', 'expected the node content'),
])
def test_the_strict_loader_names_the_key_the_source_and_the_line(text, message):
    with pytest.raises(YAMLFileError) as error:
        load_yaml(text, 'config file c.yaml')
    assert str(error.value).startswith('config file c.yaml is not valid YAML: ') and message in str(error.value)
    assert '\n' not in str(error.value)


def test_the_strict_loader_keeps_plain_anchors_and_merge_keys():
    text = 'base: &b {x: 1, y: 2}\nrun:\n  <<: *b\n  x: 3\nother: *b\n'
    assert load_yaml(text, 'f') == {'base': {'x': 1, 'y': 2}, 'run': {'x': 3, 'y': 2}, 'other': {'x': 1, 'y': 2}}
    assert load_yaml('', 'f') is None


def test_a_study_spec_is_read_strictly(tmp_path):
    spec = tmp_path / 'mine.yaml'
    spec.write_text('title: t\ngrid: []\ntitle: u\n')
    with pytest.raises(ValueError, match=f"study {spec} is not valid YAML: key 'title' appears twice"):
        load_study(spec)


def test_every_yaml_read_of_the_package_goes_through_the_strict_loader():
    package = Path(__file__).resolve().parents[1] / 'timm_advnorm'
    loose = [f'{path.relative_to(package)}:{number}' for path in package.rglob('*.py') if path.name != 'strict_yaml.py'
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if 'yaml.safe_load(' in line or 'yaml.load(' in line or 'yaml.full_load(' in line]
    assert loose == []
    shipped = [*(package / 'recipes').glob('*.yaml'), *(package / 'studies').glob('*.yaml')]
    assert len(shipped) > 10
    for path in shipped:  # the shipped files hold each key once
        load_yaml(path.read_text(), str(path))


# inputs of valid types that are no valid run


def test_the_minimum_image_size_is_the_stems_reduction():
    assert minimum_image_size(timm.create_model('test_mbn_resnet')) == 2  # total stride 32: 16 px images still run
    assert minimum_image_size(timm.create_model('tiny_mbn_resnet')) == 1
    assert minimum_image_size(timm.create_model('vit_tiny_patch16_224', img_size=32)) == 16
    assert minimum_image_size(timm.create_model('galloway_mlp')) is None  # an MLP takes its own size only
    assert minimum_image_size(timm.create_model('galloway_bn_mlp', img_size=56)) is None


def _warnings(caplog) -> List[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize('train, val, warned', [
    ('train', 'train', True), ('train', 'training', True), ('train', 'validation', False),
    ('train[:90%]', 'train[90%:]', False), ('train[:90%]', 'train[:90%]', True)])
def test_training_on_the_validation_split_is_warned_once(train, val, warned, caplog):
    check_validation_split(SimpleNamespace(train_split=train, val_split=val), None, None, True, verbose=True)
    assert len(_warnings(caplog)) == int(warned)
    if warned:
        assert 'the checkpoints are ranked on images the run trains on, so model_best and the validation numbers ' \
               'are optimistic' in _warnings(caplog)[0]


def test_a_validation_folder_around_the_training_folder_is_warned(tmp_path, caplog):
    (tmp_path / 'train').mkdir()
    data = SimpleNamespace(train_split='train', val_split='')
    check_validation_split(data, str(tmp_path / 'train'), str(tmp_path), False, verbose=True)
    check_validation_split(data, str(tmp_path / 'train'), str(tmp_path), False, verbose=False)  # rank > 0: silent
    assert len(_warnings(caplog)) == 1


@pytest.mark.parametrize('data, warning', [
    (EvalDataOptions(split='train'), "--val-split 'train' is a training split: the numbers are measured on images"),
    (EvalDataOptions(split='val', record=DataRecord(recorded=True, train_split='val')),
     "is the split the checkpoint trained on (its --train-split 'val')"),
    (EvalDataOptions(dataset='digits', split=''), "--val-split '' is the root of digits, which holds the training"),
    (EvalDataOptions(split='validation'), None),
])
def test_evaluating_a_training_split_is_warned(data, warning, caplog):
    _warn_training_split(data)
    warnings = _warnings(caplog)
    assert len(warnings) == (warning is not None)
    if warning:
        assert warning in warnings[0] and 'so they are optimistic' in warnings[0]


@pytest.mark.parametrize('argv, warned', [
    (['--clean-ratio', '0.5'], '--clean-ratio (method mixed): not used by --method mbn, so ignored'),
    (['--method', 'mixed', '--clean-ratio', '0.5'], None),
    (['--method', 'vanilla', '--attack-steps', '3'], '--attack-steps (training attack): not used by --method vanilla'),
    (['--method', 'vanilla', '--attack-eps', '8'], None),  # the robust validation's budget (--val-attack-eps)
    (['-c', 'digits_demo_mbn', '--method', 'vanilla'], None),  # a recipe is a base other methods run from
])
def test_an_option_the_method_does_not_use_is_named(argv, warned, caplog):
    parse_train_args(argv)
    warnings = _warnings(caplog)
    assert len(warnings) == (warned is not None)
    if warned:
        assert warned in warnings[0]
