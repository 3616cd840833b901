"""Every packaged recipe parses by name, names a registered model and method, and builds its model (meta device);
``-c`` takes a path or a packaged name, and ``--list-recipes`` shows them."""
import pytest
import timm
import torch
import yaml

import timm_advnorm  # noqa: F401
from timm_advnorm.recipes import list_recipes, recipe_path, resolve_config
from timm_advnorm.task import TASKS
from timm_advnorm.train.args import parse_args

RECIPES = list_recipes()


def test_there_are_recipes():
    assert len(RECIPES) >= 8 and 'digits_demo_mbn' in RECIPES


@pytest.mark.parametrize('recipe', RECIPES)
def test_recipe_is_consistent(recipe):
    args, _ = parse_args(['-c', recipe])
    assert args.method in TASKS
    assert timm.is_model(args.model), args.model
    with torch.device('meta'):
        model = timm.create_model(args.model, num_classes=args.num_classes or 10)
    if args.method in ('mbn', 'fast_advprop'):
        assert any('adv_bn' in n for n, _ in model.named_modules())
    if args.method == 'nofrost':
        assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        assert args.clip_mode == 'agc'


def test_unknown_recipe_key_is_rejected(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('modle: resnet50\n')
    with pytest.raises(SystemExit):
        parse_args(['-c', str(bad)])


def test_config_takes_a_path_before_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config('digits_demo_mbn') == recipe_path('digits_demo_mbn')
    assert resolve_config('digits_demo_mbn.yaml') == recipe_path('digits_demo_mbn')
    (tmp_path / 'digits_demo_mbn').write_text('epochs: 3\n')  # a file of that name in the working folder wins
    args, _ = parse_args(['-c', 'digits_demo_mbn'])
    assert args.epochs == 3 and args.model == 'test_mbn_resnet'  # the file's value, the rest from the defaults
    yaml_text = recipe_path('digits_demo_mbn').read_text()
    args, _ = parse_args(['-c', str(recipe_path('digits_demo_mbn'))])
    assert args.epochs == yaml.safe_load(yaml_text)['epochs']


def test_unknown_config_is_one_line_naming_the_packaged_recipes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(['-c', 'no_such_recipe'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'no_such_recipe' in err[0] and 'digits_demo_mbn' in err[0]


def test_list_recipes_describes_each_and_exits_zero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(['--list-recipes'])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in RECIPES:
        assert name in out
    assert '--model test_mbn_resnet --method mbn, digits' in out


def test_old_option_spellings_are_hidden_aliases(capsys):
    """``--val-samples`` (and its YAML key) still set ``--num-samples``, but --help shows one name."""
    args, _ = parse_args(['--val-samples', '7'])
    assert args.num_samples == 7
    with pytest.raises(SystemExit):
        parse_args(['--help'])
    help_text = capsys.readouterr().out
    assert '--num-samples' in help_text and '--val-samples' not in help_text


def test_help_shows_defaults_and_the_config_option(capsys):
    with pytest.raises(SystemExit):
        parse_args(['--help'])
    help_text = ' '.join(capsys.readouterr().out.split())
    assert '-c FILE, --config FILE' in help_text
    assert '--attack-steps ATTACK_STEPS Attack iterations (PGD-N). (default: 30)' in help_text
    assert '--attack-eps ATTACK_EPS Attack budget on the 0-255 scale. (default: 16.0)' in help_text


def test_agc_without_a_threshold_clips_with_timms_default_factor():
    """``--clip-mode agc`` alone used to clip nothing (no --clip-grad); it now gets AGC's usual clip factor."""
    args, args_text = parse_args(['--clip-mode', 'agc'])
    assert args.clip_grad == 0.01 and 'clip_grad: 0.01' in args_text
    assert parse_args(['--clip-mode', 'agc', '--clip-grad', '0.05'])[0].clip_grad == 0.05
    assert parse_args(['--clip-mode', 'norm'])[0].clip_grad is None


def _usage_error(parse, argv, capsys) -> str:
    """The one line a usage error writes (exit status 2, no usage block)."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'usage:' not in err[0], err
    return err[0]


@pytest.mark.parametrize('text, message', [
    ('epochs: 2.5\n', 'key epochs: '),
    ('lr: [0.1, 0.2]\n', 'key lr: expected a single float value, got [0.1, 0.2]'),
    ('lr: [{a: 1}]\n', 'key lr: expected a single float value, got [{"a": 1}]'),
    ('scale: 0.5\n', 'key scale: expected a list of 2 float values, got 0.5'),
    ('scale: [0.1, 0.5, 1.0]\n', 'key scale: expected 2 float values, got 3: [0.1, 0.5, 1.0]'),
    ('method: foo\n', 'key method: invalid choice: "foo" (choose from vanilla, madry'),
    ('pretrained: "yes"\n', 'key pretrained: expected true or false, got "yes"'),
    ('attack_steps: null\n', 'key attack_steps: expected a single int value, got null'),
    ('decay_milestones: []\n', 'key decay_milestones: expected one or more int values, got an empty list'),
    ('val_samples: many\n', 'key val_samples: invalid value "many"'),  # the hidden alias of num_samples
    ('list_recipes: true\n', 'key list_recipes: --list-recipes is an action, not a setting a config can hold'),
    ('- epochs: 1\n- lr: 0.1\n', 'must map argument names to values, got a list'),
    ('just a sentence\n', 'must map argument names to values, got a str'),
    ('epochs: 3\nmodel: \x01\n', 'is not valid YAML: special characters are not allowed (line 2, column 8)'),
])
def test_train_config_values_are_held_to_the_options_types(tmp_path, capsys, text, message):
    path = tmp_path / 'bad.yaml'
    path.write_text(text)
    line = _usage_error(parse_args, ['-c', str(path)], capsys)
    assert line.startswith(f'train_adv.py: error: config file {path}') and message in line, line


@pytest.mark.parametrize('text, message', [
    ('gammas: [a]\n', 'key gammas: invalid float value: "a"'),
    ('sanity_steps: [1, 2]\n', 'key sanity_steps: expected a single int value, got [1, 2]'),
    ('attack_norm: l3\n', 'key attack_norm: invalid choice: "l3" (choose from linf, l2)'),
    ('interpolations: [mix, cubic]\n', 'key interpolations: invalid choice: "cubic" (choose from mix, logits)'),
    ('model_kwargs: [drop_rate=0.1]\n', 'key model_kwargs: expected a mapping of names to values'),
    ('reduced: 1\n', 'key reduced: expected true or false, got 1'),
])
def test_validate_config_values_are_held_to_the_options_types(tmp_path, capsys, text, message):
    from timm_advnorm.eval.script import parse_args as parse_validate_args
    path = tmp_path / 'bad.yaml'
    path.write_text(text)
    line = _usage_error(parse_validate_args, ['-c', str(path), '--model', 'test_mbn_resnet', '--dataset', 'digits'],
                        capsys)
    assert line.startswith(f'validate_adv.py: error: config file {path}') and message in line, line


def test_config_values_convert_as_the_command_line_would(tmp_path):
    """One value for a list option is a one-element list (as ``--mean 0.5``); PyYAML's string ``1e-4`` is a float;
    the command line still wins over the config."""
    from timm_advnorm.eval.script import parse_args as parse_validate_args
    path = tmp_path / 'config.yaml'
    path.write_text('lr: 1e-4\nmean: 0.5\ndecay_milestones: 30\nval_attack_targeted: null\n')
    args, _ = parse_args(['-c', str(path)])
    assert args.lr == 1e-4 and args.mean == [0.5] and args.decay_milestones == [30] and args.val_attack_targeted is None
    assert parse_args(['-c', str(path), '--lr', '0.2'])[0].lr == 0.2
    path.write_text('gammas: 0.5\nattack_steps: 10\nmodel_kwargs: {drop_rate: 0.1}\n')
    args = parse_validate_args(['-c', str(path), '--model', 'test_mbn_resnet', '--dataset', 'digits'])
    assert args.gammas == [0.5] and args.attack_steps == [10] and args.model_kwargs == {'drop_rate': 0.1}


def test_the_arguments_a_run_saves_are_a_valid_config(tmp_path):
    """``args.yaml`` of a run (every option, unset ones as null) reproduces the run's arguments through ``-c``."""
    args, args_text = parse_args(['-c', 'digits_demo_mbn', '--mean', '0.5', '0.5', '0.5'])
    (tmp_path / 'args.yaml').write_text(args_text)
    again, _ = parse_args(['-c', str(tmp_path / 'args.yaml')])
    assert {**vars(again), 'config': None} == {**vars(args), 'config': None}


def test_usage_errors_are_one_line_with_a_help_hint(capsys):
    line = _usage_error(parse_args, ['--lr', 'fast'], capsys)
    assert line.startswith('train_adv.py: error: argument --lr: ') and line.endswith('fast (see --help)'), line
    assert _usage_error(parse_args, ['-c'], capsys).endswith('argument -c/--config: expected one argument (see --help)')
