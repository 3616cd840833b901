"""Reading checkpoints, loading them loudly, and loading exports offline from a Hugging Face cache snapshot."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

import timm_advnorm
from timm_advnorm.hub import (
    build_export_model, create_model_from_name_or_checkpoint, install_to_hf_cache, load_weights, read_checkpoint,
    write_export)
from timm_advnorm.layers import export_branch, route
from timm_advnorm.models import base_architecture

REPO = Path(__file__).resolve().parents[1]
NUM_CLASSES = 5


def _outputs(model: torch.nn.Module, x: torch.Tensor, branch: str = 'clean') -> torch.Tensor:
    with torch.no_grad(), route(model, branch):
        return model(x)


def _train_checkpoint(path: Path, model: torch.nn.Module, ema: torch.nn.Module = None, ddp: bool = False) -> Path:
    state_dict = model.state_dict()
    if ddp:
        state_dict = {f'module.{k}': v for k, v in state_dict.items()}
    args = argparse.Namespace(model='test_mbn_resnet', num_classes=NUM_CLASSES, mean=None, std=None, lr=0.1)
    checkpoint = dict(epoch=7, arch='test_mbn_resnet', state_dict=state_dict, args=args, version=2)
    if ema is not None:
        checkpoint['state_dict_ema'] = ema.state_dict()
    torch.save(checkpoint, path)
    return path


@pytest.fixture(scope='module')
def mbn(two_branch_mbn):
    return two_branch_mbn(num_classes=NUM_CLASSES)


@pytest.fixture(scope='module')
def x():
    return torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_read_training_checkpoint_strips_ddp_prefix_and_keeps_metadata(tmp_path, mbn, two_branch_mbn):
    ema = two_branch_mbn(seed=1, num_classes=NUM_CLASSES)
    checkpoint = read_checkpoint(_train_checkpoint(tmp_path / 'ckpt.pth.tar', mbn, ema=ema, ddp=True))
    assert checkpoint.arch == 'test_mbn_resnet' and checkpoint.epoch == 7
    assert checkpoint.args['num_classes'] == NUM_CLASSES
    assert set(checkpoint.state_dict) == set(mbn.state_dict())
    assert torch.equal(checkpoint.weights(ema=True)['fc.weight'], ema.fc.weight)


def test_read_bare_state_dicts_and_missing_ema(tmp_path, mbn):
    torch.save(mbn.state_dict(), tmp_path / 'bare.pth')
    safetensors.torch.save_file(mbn.state_dict(), tmp_path / 'bare.safetensors')
    for name in ('bare.pth', 'bare.safetensors'):
        checkpoint = read_checkpoint(tmp_path / name)
        assert checkpoint.arch is None
        assert torch.equal(checkpoint.state_dict['fc.weight'], mbn.fc.weight)
        with pytest.raises(ValueError, match='no EMA'):
            checkpoint.weights(ema=True)


@pytest.mark.parametrize('content, error', [
    (None, FileNotFoundError), ({'epoch': 1}, ValueError), ([1, 2, 3], ValueError)])
def test_read_checkpoint_rejects_bad_input(tmp_path, content, error):
    path = tmp_path / 'bad.pth'
    if content is not None:
        torch.save(content, path)
    with pytest.raises(error):
        read_checkpoint(path)


def test_load_weights_checks_class_count_and_normalization_layout(tmp_path, mbn, x):
    path = _train_checkpoint(tmp_path / 'ckpt.pth.tar', mbn)
    with pytest.raises(ValueError, match=f'has {NUM_CLASSES} classes but the model has 7'):
        load_weights(timm.create_model('test_mbn_resnet', num_classes=7), path)
    with pytest.raises(ValueError, match=r'the checkpoint has mixture BN and the model \(test_resnet\) plain BN: pass '
                                         r'--branch clean or --branch adv'):
        load_weights(timm.create_model('test_resnet', num_classes=NUM_CLASSES), path)
    with pytest.raises(ValueError, match='plain-BN model'):
        load_weights(timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES), path, branch='adv')
    plain = load_weights(timm.create_model('test_resnet', num_classes=NUM_CLASSES).eval(), path, branch='adv')
    torch.testing.assert_close(_outputs(plain, x), _outputs(mbn, x, 'adv'))


def test_plain_checkpoint_initializes_both_branches(mbn, x):
    plain = export_branch(mbn, 'clean')
    model = load_weights(timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES).eval(), plain.state_dict())
    expected = _outputs(plain, x)
    torch.testing.assert_close(_outputs(model, x, 'clean'), expected)
    torch.testing.assert_close(_outputs(model, x, 'adv'), expected)


def test_create_from_checkpoint_infers_classes_and_refuses_a_mismatch(tmp_path, mbn, x):
    path = _train_checkpoint(tmp_path / 'ckpt.pth.tar', mbn)
    model = create_model_from_name_or_checkpoint(checkpoint=str(path)).eval()
    assert model.num_classes == NUM_CLASSES
    torch.testing.assert_close(_outputs(model, x, 'adv'), _outputs(mbn, x, 'adv'))
    with pytest.raises(ValueError, match='num_classes=10 was requested'):
        create_model_from_name_or_checkpoint('test_mbn_resnet', str(path), num_classes=10)
    plain = create_model_from_name_or_checkpoint(checkpoint=str(path), branch='clean').eval()
    assert plain.pretrained_cfg['architecture'] == base_architecture('test_mbn_resnet')
    torch.testing.assert_close(_outputs(plain, x), _outputs(mbn, x, 'clean'))


def _export(folder: Path, model: torch.nn.Module, branch: str = None) -> Path:
    """Export through the publishing path, from a training checkpoint."""
    folder.mkdir(parents=True)
    ckpt = read_checkpoint(_train_checkpoint(folder.parent / f'{folder.name}.pth.tar', model))
    export, _ = build_export_model(ckpt, branch=branch)
    write_export(export, folder, data_args=dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)))
    return folder


def test_local_dir_export_loads_with_its_preprocessing_and_class_check(tmp_path, mbn, x):
    folder = _export(tmp_path / 'full', mbn)
    model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    assert json.loads((folder / 'config.json').read_text())['architecture'] == 'test_mbn_resnet'
    assert tuple(model.pretrained_cfg['mean']) == (0.5, 0.5, 0.5)
    for branch in ('clean', 'adv'):
        torch.testing.assert_close(_outputs(model, x, branch), _outputs(mbn, x, branch))
    with pytest.raises(ValueError, match='timm would drop the classifier'):
        create_model_from_name_or_checkpoint(f'local-dir:{folder}', pretrained=True, num_classes=10)
    fresh_head = create_model_from_name_or_checkpoint(
        f'local-dir:{folder}', pretrained=True, num_classes=10, reset_classifier=True)
    assert fresh_head.num_classes == 10


_LOAD_OFFLINE = '''
import sys, torch, timm
{plugin}
x = torch.load(sys.argv[1])
out = {{}}
for name in sys.argv[3:]:
    model = timm.create_model(name, pretrained=True).eval()
    with torch.no_grad():
        out[name] = model(x)
out['plugin_imported'] = 'timm_advnorm' in sys.modules
torch.save(out, sys.argv[2])
'''


def _load_in_subprocess(tmp_path: Path, hf_home: Path, x: torch.Tensor, names, plugin: bool) -> dict:
    """Load `names` in a fresh interpreter with the Hub offline (huggingface_hub reads the env at import time)."""
    torch.save(x, tmp_path / 'x.pt')
    env = {k: v for k, v in os.environ.items() if not k.startswith('HF_')}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE='1', PYTHONPATH=str(REPO) if plugin else '')
    script = _LOAD_OFFLINE.format(plugin='import timm_advnorm' if plugin else '')
    subprocess.run([sys.executable, '-c', script, str(tmp_path / 'x.pt'), str(tmp_path / 'out.pt'), *names],
                   check=True, env=env, cwd=tmp_path, capture_output=True)
    return torch.load(tmp_path / 'out.pt')


def test_hub_export_loads_offline_from_the_cache(tmp_path, mbn, x):
    hf_home = tmp_path / 'hf'
    install_to_hf_cache(_export(tmp_path / 'full', mbn), 'org/mbn', cache_dir=hf_home / 'hub')
    out = _load_in_subprocess(tmp_path, hf_home, x, ['hf-hub:org/mbn'], plugin=True)
    torch.testing.assert_close(out['hf-hub:org/mbn'], _outputs(mbn, x, 'clean'))


def test_plain_branch_export_loads_with_stock_timm_and_no_plugin(tmp_path, mbn, x):
    hf_home = tmp_path / 'hf'
    folder = _export(tmp_path / 'adv', mbn, branch='adv')
    install_to_hf_cache(folder, 'org/plain-adv', cache_dir=hf_home / 'hub')
    names = ['hf-hub:org/plain-adv', f'local-dir:{folder}']
    out = _load_in_subprocess(tmp_path, hf_home, x, names, plugin=False)
    assert not out['plugin_imported']
    assert json.loads((folder / 'config.json').read_text())['architecture'] == 'test_resnet'
    for name in names:
        torch.testing.assert_close(out[name], _outputs(mbn, x, 'adv'))


def test_hub_checkpoint_source_reads_the_cache(tmp_path, mbn, x, monkeypatch):
    hf_home = tmp_path / 'hf'
    install_to_hf_cache(_export(tmp_path / 'full', mbn), 'org/mbn', cache_dir=hf_home / 'hub')
    from huggingface_hub import constants
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(hf_home / 'hub'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    model = load_weights(timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES).eval(), 'hf-hub:org/mbn')
    torch.testing.assert_close(_outputs(model, x, 'adv'), _outputs(mbn, x, 'adv'))
    assert timm_advnorm.has_mixture_bn(model)


def test_a_model_trained_from_an_export_keeps_its_preprocessing_and_padding(tmp_path, x):
    """Fine-tuning a converted model (TF padding, its own mean/std) through train_adv's checkpoint, then evaluating
    or publishing it, must rebuild the model it was trained as, not the registry default of its architecture."""
    from timm_advnorm.convert.tensorpack import use_tf_same_padding
    from timm_advnorm.hub import MODEL_CONFIG_ARG, model_config
    torch.manual_seed(0)
    source = use_tf_same_padding(timm.create_model('test_resnet', num_classes=NUM_CLASSES)).eval()
    folder = tmp_path / 'converted'
    folder.mkdir()
    write_export(source, folder, data_args=dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
                 plugin_config=dict(padding='tf_same', converted_from=dict(format='test')))
    name = f'local-dir:{folder}'
    trained = create_model_from_name_or_checkpoint(name, pretrained=True).eval()
    args = argparse.Namespace(model=name, num_classes=NUM_CLASSES, **{MODEL_CONFIG_ARG: model_config(trained)})
    path = tmp_path / 'last.pth.tar'
    torch.save(dict(epoch=1, arch=name, state_dict=trained.state_dict(), args=args, version=2), path)

    reloaded = create_model_from_name_or_checkpoint(checkpoint=str(path)).eval()
    assert tuple(reloaded.pretrained_cfg['mean']) == (0.5, 0.5, 0.5)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(x), source(x))
    export, source_arch = build_export_model(read_checkpoint(path))
    assert source_arch == 'test_resnet' and tuple(export.pretrained_cfg['mean']) == (0.5, 0.5, 0.5)
    assert read_checkpoint(path).config['timm_advnorm'] == dict(padding='tf_same')  # provenance stays with the source


def test_overwriting_a_symlinked_export_replaces_the_folder_it_points_to(tmp_path):
    from timm_advnorm.hub import staged_folder
    from timm_advnorm.write_guard import EXPORT_MANIFEST
    real, link = tmp_path / 'real', tmp_path / 'link'
    with staged_folder(real) as stage:
        (stage / 'old.txt').write_text('old')
    link.symlink_to(real, target_is_directory=True)
    with staged_folder(link, overwrite=True) as stage:
        (stage / 'new.txt').write_text('new')
    assert link.is_symlink() and sorted(p.name for p in link.iterdir()) == [EXPORT_MANIFEST, 'new.txt']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['link', 'real']


def test_hub_does_not_depend_on_the_converters():
    """Converters build on the hub (exports, checkpoint reading), never the other way round: no import circle."""
    import subprocess
    import sys
    code = ('import sys, timm_advnorm.hub, timm_advnorm.weights.loading, timm_advnorm.hub.publish; '
            'assert not any(m.startswith("timm_advnorm.convert") for m in sys.modules), sorted(sys.modules)')
    subprocess.run([sys.executable, '-c', code], check=True, timeout=120)
