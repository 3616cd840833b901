"""A published whole mixture-BN model loads routed to the inference branch its publisher chose, by every loader."""
import argparse
import json
from pathlib import Path

import pytest
import timm
import torch

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.hub import (
    MODEL_CONFIG_ARG, build_export_model, create_model_from_name_or_checkpoint, install_to_hf_cache, model_config,
    read_checkpoint, write_export)
from timm_advnorm.commands.publish import get_args_parser, publish_options
from timm_advnorm.hub.publish import DEFAULT_CARD_TEMPLATE, publish
from timm_advnorm.hub.publish_options import ExportOptions, PublishOptions, TargetOptions
from timm_advnorm.layers import export_branch, has_mixture_bn, mixture_bn_modules, route
from timm_advnorm.layers.routing import INFERENCE_BRANCH_ARG, get_inference_branch, set_inference_branch

NUM_CLASSES = 5
REPO_ID = 'org/test-mbn-adv'


def _outputs(model: torch.nn.Module, x: torch.Tensor, branch: str = None) -> torch.Tensor:
    """Eval outputs of `model` on `branch`, or on the route it holds when `branch` is None."""
    model.eval()
    with torch.no_grad():
        if branch is None:
            return model(x)
        with route(model, branch):
            return model(x)


def _publish(*argv) -> None:
    publish(publish_options(get_args_parser().parse_args([str(a) for a in argv])), DEFAULT_CARD_TEMPLATE.read_text())


@pytest.fixture(scope='module')
def source(two_branch_mbn):
    return two_branch_mbn(num_classes=NUM_CLASSES)


@pytest.fixture(scope='module')
def x():
    return torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory, source) -> Path:
    """A training checkpoint as train_adv.py writes it: the args record the model config (clean branch by default)."""
    path = tmp_path_factory.mktemp('run') / 'last.pth.tar'
    args = argparse.Namespace(model='test_mbn_resnet', num_classes=NUM_CLASSES, method='mbn',
                              **{MODEL_CONFIG_ARG: model_config(timm.create_model('test_mbn_resnet'))})
    torch.save(dict(epoch=2, arch='test_mbn_resnet', state_dict=source.state_dict(), args=args), path)
    return path


@pytest.fixture(scope='module')
def export(tmp_path_factory, checkpoint) -> Path:
    """The whole mixture-BN model published with ``--inference-branch adv``."""
    folder = tmp_path_factory.mktemp('exports') / 'test-mbn-adv'
    _publish(checkpoint, '--inference-branch', 'adv', '--local-dir', folder)
    return folder


@pytest.fixture
def hub_cache(tmp_path, export, monkeypatch):
    """The export installed as ``hf-hub:org/test-mbn-adv`` in an offline Hugging Face cache."""
    from huggingface_hub import constants
    install_to_hf_cache(export, REPO_ID, cache_dir=tmp_path / 'hub')
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)


def _assert_on_adv(model: torch.nn.Module, source: torch.nn.Module, x: torch.Tensor) -> None:
    routes = {m.route for m in mixture_bn_modules(model)}
    assert routes == {'adv'}
    torch.testing.assert_close(_outputs(model, x), _outputs(source, x, 'adv'))


def test_config_records_the_inference_branch(export):
    config = json.loads((export / 'config.json').read_text())
    assert config['architecture'] == 'test_mbn_resnet'
    assert config['model_args'][INFERENCE_BRANCH_ARG] == 'adv'


def test_publishing_takes_the_recorded_branch_without_changing_the_options(tmp_path, checkpoint):
    """The library publishes from typed options; the branch the checkpoint records is resolved into a copy of them,
    so the options given still say that none was chosen."""
    options = PublishOptions(ExportOptions(str(checkpoint)), TargetOptions(local_dir=str(tmp_path / 'out')))
    assert publish(options, DEFAULT_CARD_TEMPLATE.read_text()) is None
    assert options.export == ExportOptions(str(checkpoint))
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['model_args'][INFERENCE_BRANCH_ARG] == 'clean'


@pytest.mark.parametrize('kind', ['hf-hub', 'local-dir'])
def test_timm_loads_the_export_on_its_inference_branch(hub_cache, export, source, x, kind):
    name = f'hf-hub:{REPO_ID}' if kind == 'hf-hub' else f'local-dir:{export}'
    _assert_on_adv(timm.create_model(name, pretrained=True), source, x)


@pytest.mark.parametrize('kind', ['hf-hub', 'local-dir'])
def test_plugin_loader_loads_the_export_on_its_inference_branch(hub_cache, export, source, x, kind):
    name = f'hf-hub:{REPO_ID}' if kind == 'hf-hub' else f'local-dir:{export}'
    _assert_on_adv(create_model_from_name_or_checkpoint(name, pretrained=True), source, x)
    _assert_on_adv(create_model_from_name_or_checkpoint(checkpoint=name), source, x)


def test_route_blocks_return_to_the_inference_branch(export, source, x):
    model = timm.create_model(f'local-dir:{export}', pretrained=True).eval()
    with route(model, 'clean'):
        torch.testing.assert_close(_outputs(model, x), _outputs(source, x, 'clean'))
        with route(model, 'split', n_clean=1):
            pass
    _assert_on_adv(model, source, x)


def test_branch_exports_of_a_routed_model_still_work(export, source, x):
    model = timm.create_model(f'local-dir:{export}', pretrained=True).eval()
    for branch in ('clean', 'adv'):
        plain = export_branch(model, branch)
        assert not has_mixture_bn(plain)
        torch.testing.assert_close(_outputs(plain, x), _outputs(source, x, branch))
    _assert_on_adv(model, source, x)


def test_training_from_the_export_keeps_the_branch_in_its_checkpoint(tmp_path, export, source, x):
    """train_adv.py records `model_config` in the args it saves: a reload and a republish keep the branch."""
    trained = create_model_from_name_or_checkpoint(f'local-dir:{export}', pretrained=True)
    assert model_config(trained)['model_args'] == {INFERENCE_BRANCH_ARG: 'adv'}
    args = argparse.Namespace(model=f'local-dir:{export}', num_classes=NUM_CLASSES,
                              **{MODEL_CONFIG_ARG: model_config(trained)})
    path = tmp_path / 'last.pth.tar'
    torch.save(dict(epoch=0, arch='test_mbn_resnet', state_dict=trained.state_dict(), args=args), path)
    _assert_on_adv(create_model_from_name_or_checkpoint(checkpoint=str(path)), source, x)
    rebuilt, _ = build_export_model(read_checkpoint(path))
    _assert_on_adv(rebuilt, source, x)
    clean = create_model_from_name_or_checkpoint(checkpoint=str(path), **{INFERENCE_BRANCH_ARG: 'clean'})
    assert get_inference_branch(clean) == 'clean'


def test_republishing_an_export_can_choose_another_branch(tmp_path, export, source, x):
    folder = tmp_path / 'clean'
    _publish(f'local-dir:{export}', '--inference-branch', 'clean', '--local-dir', folder)
    assert json.loads((folder / 'config.json').read_text())['model_args'][INFERENCE_BRANCH_ARG] == 'clean'
    model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    assert get_inference_branch(model) == 'clean'
    torch.testing.assert_close(_outputs(model, x), _outputs(source, x, 'clean'))


@pytest.mark.parametrize('branch', ['clean', 'adv'])
def test_plain_branch_export_of_a_routed_export_records_no_route(tmp_path, export, source, x, branch):
    folder = tmp_path / branch
    _publish(f'local-dir:{export}', '--branch', branch, '--local-dir', folder)
    config = json.loads((folder / 'config.json').read_text())
    assert config['architecture'] == 'test_resnet' and INFERENCE_BRANCH_ARG not in config['model_args']
    plain = timm.create_model(f'local-dir:{folder}', pretrained=True)  # stock timm's test_resnet: no plugin keyword
    assert not has_mixture_bn(plain)
    torch.testing.assert_close(_outputs(plain, x), _outputs(source, x, branch))


def test_write_export_needs_one_branch(tmp_path, two_branch_mbn):
    model = two_branch_mbn(num_classes=NUM_CLASSES)
    with route(model, 'mix', gamma=0.5), pytest.raises(ValueError, match='one branch'):
        write_export(model, tmp_path)
    write_export(set_inference_branch(model, 'adv'), tmp_path)
    assert json.loads((tmp_path / 'config.json').read_text())['model_args'][INFERENCE_BRANCH_ARG] == 'adv'


def test_inference_branch_of_a_plain_model_is_refused(tmp_path, export):
    folder = tmp_path / 'plain'
    _publish(f'local-dir:{export}', '--branch', 'adv', '--local-dir', folder)
    with pytest.raises(ValueError, match='mixture-BN'):
        build_export_model(read_checkpoint(f'local-dir:{folder}'), inference_branch='adv')


def _branch_notices(caplog) -> list:
    return [r for r in caplog.records if r.name == 'timm_advnorm.layers.branch_notice']


def test_timm_checkpoint_path_says_which_branch_it_runs_on(checkpoint, source, x, caplog):
    """timm's own loader reads the state dict alone: the model runs on its default clean branch and says so; the
    plugin's loader and an explicit branch load silently, and every loader agrees on the branch it names."""
    with caplog.at_level('WARNING'):
        plain = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES, checkpoint_path=str(checkpoint))
    notices = _branch_notices(caplog)
    assert len(notices) == 1 and 'runs on its clean branch' in notices[0].getMessage()
    assert 'inference_branch="adv"' in notices[0].getMessage()
    torch.testing.assert_close(_outputs(plain, x), _outputs(source, x, 'clean'))

    caplog.clear()
    with caplog.at_level('WARNING'):
        chosen = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES, inference_branch='adv',
                                   checkpoint_path=str(checkpoint))
        loaded = create_model_from_name_or_checkpoint(checkpoint=checkpoint)
    assert _branch_notices(caplog) == []
    _assert_on_adv(chosen, source, x)
    recorded = get_inference_branch(loaded)
    torch.testing.assert_close(_outputs(loaded, x), _outputs(source, x, recorded))


def test_no_branch_notice_for_untrained_branches_or_a_chosen_branch(tmp_path, caplog):
    fresh = timm.create_model('tiny_mbn_resnet', num_classes=3)
    path = tmp_path / 'fresh.pth'
    torch.save({'state_dict': fresh.state_dict()}, path)
    with caplog.at_level('WARNING'):
        timm.create_model('tiny_mbn_resnet', num_classes=3, checkpoint_path=str(path))  # both branches equal
        trained = timm.create_model('tiny_mbn_resnet', num_classes=3)
        with torch.no_grad():
            next(m for m in mixture_bn_modules(trained)).adv_bn.bias.add_(1.0)
        chosen = set_inference_branch(timm.create_model('tiny_mbn_resnet', num_classes=3), 'clean')
        chosen.load_state_dict(trained.state_dict())
    assert _branch_notices(caplog) == []
    with caplog.at_level('WARNING'):
        timm.create_model('tiny_mbn_resnet', num_classes=3).load_state_dict(trained.state_dict())
    assert len(_branch_notices(caplog)) == 1
