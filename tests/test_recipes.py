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
