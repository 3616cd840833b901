"""Every recipe parses, names a registered model and method, and builds its model and task (meta device)."""
from pathlib import Path

import pytest
import timm
import torch

import timm_advnorm  # noqa: F401
from timm_advnorm.task import TASKS
from timm_advnorm.train.args import parse_args

RECIPES = sorted((Path(__file__).resolve().parents[1] / 'recipes').glob('*.yaml'))


def test_there_are_recipes():
    assert len(RECIPES) >= 8


@pytest.mark.parametrize('recipe', RECIPES, ids=[r.stem for r in RECIPES])
def test_recipe_is_consistent(recipe):
    args, _ = parse_args(['-c', str(recipe)])
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
