"""Converters, each on a synthetic file laid out exactly as the original release, checked against a reference
forward written for the original layout."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import timm_advnorm  # noqa: F401  (registers mbn_resnet*)
from timm_advnorm.convert import (
    read_tensorpack_npz, tensorpack_resnet_layers, tensorpack_resnet_state_dict, use_tf_same_padding)
from timm_advnorm.commands.convert import run
from timm_advnorm.convert.common import load_exactly
from timm_advnorm.hub import create_model_from_name_or_checkpoint
from timm_advnorm.layers import route


def _convert(*argv) -> int:
    return run(argv=[str(a) for a in argv])


def _images(size: int = 32, n: int = 2) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0))


# --- Fast AdvProp: torchvision ResNet with MixBatchNorm2d (an `aux_bn` child), saved through DataParallel ---

class MixBatchNorm2d(nn.BatchNorm2d):
    """Fast AdvProp's layout: the module is the clean BN, child `aux_bn` the adversarial one."""

    def __init__(self, num_features: int):
        super().__init__(num_features)
        self.aux_bn = nn.BatchNorm2d(num_features)
        self.batch_type = 'clean'

    def forward(self, x):
        return self.aux_bn(x) if self.batch_type == 'adv' else super().forward(x)


def _fast_advprop_reference(arch: str = 'resnet50') -> nn.Module:
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(norm_layer=MixBatchNorm2d)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _reference_output(model: nn.Module, x: torch.Tensor, batch_type: str) -> torch.Tensor:
    for module in model.modules():
        if isinstance(module, MixBatchNorm2d):
            module.batch_type = batch_type
    with torch.no_grad():
        return model(x)


def _save_fast_advprop(path: Path, model: nn.Module) -> Path:
    wrapped = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.save({'epoch': 105, 'state_dict': wrapped.state_dict(), 'acc': 77.1, 'best_acc': 77.2,
                'optimizer': optimizer.state_dict()}, path)
    return path


@pytest.fixture(scope='module')
def fast_advprop(tmp_path_factory):
    folder = tmp_path_factory.mktemp('fast_advprop')
    model = _fast_advprop_reference()
    return model, _save_fast_advprop(folder / 'checkpoint.pth.tar', model)


def test_fast_advprop_converts_to_mbn_resnet50_with_both_branches(tmp_path, fast_advprop):
    reference, src = fast_advprop
    assert _convert('fast-advprop', src, tmp_path / 'out') == 0
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['architecture'] == 'mbn_resnet50'
    assert config['pretrained_cfg']['mean'] == [0.5] * 3 and config['pretrained_cfg']['std'] == [0.5] * 3
    assert config['timm_advnorm']['converted_from']['inference_branch'] == 'clean'
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    x = _images()
    for ours, theirs in (('clean', 'clean'), ('adv', 'adv')):
        with torch.no_grad(), route(model, ours):
            torch.testing.assert_close(model(x), _reference_output(reference, x, theirs))


def test_fast_advprop_branch_converts_to_plain_timm(tmp_path, fast_advprop):
    reference, src = fast_advprop
    assert _convert('fast-advprop', src, tmp_path / 'adv', '--branch', 'adv') == 0
    model = timm.create_model(f'local-dir:{tmp_path / "adv"}', pretrained=True).eval()
    assert type(model).__name__ == 'ResNet' and model.pretrained_cfg['architecture'] == 'resnet50'
    x = _images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), _reference_output(reference, x, 'adv'))


@pytest.mark.parametrize('edit, message', [
    (lambda sd: sd.update({'module.layer1.0.extra': torch.zeros(1)}), '1 unexpected key (layer1.0.extra)'),
    (lambda sd: sd.pop('module.layer4.2.bn3.aux_bn.running_var'), '1 missing key (layer4.2.bn3.adv_bn.running_var)'),
    (lambda sd: [sd.pop(k) for k in list(sd) if 'aux_bn' in k], 'not a Fast AdvProp mixture-BN'),
])
def test_fast_advprop_keys_must_map_one_to_one(tmp_path, fast_advprop, capsys, edit, message):
    _, src = fast_advprop
    checkpoint = torch.load(src, weights_only=True)
    edit(checkpoint['state_dict'])
    torch.save(checkpoint, tmp_path / 'edited.pth.tar')
    assert _convert('fast-advprop', tmp_path / 'edited.pth.tar', tmp_path / 'out') == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_fast_advprop_detects_other_torchvision_resnets(tmp_path):
    reference = _fast_advprop_reference('resnet18')
    src = _save_fast_advprop(tmp_path / 'r18.pth.tar', reference)
    assert _convert('fast-advprop', src, tmp_path / 'out') == 0
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    assert model.pretrained_cfg['architecture'] == 'mbn_resnet18'
    x = _images(32)
    with torch.no_grad(), route(model, 'adv'):
        torch.testing.assert_close(model(x), _reference_output(reference, x, 'adv'))


# --- NoFrost: timm's own NF-ResNet, trained under DataParallel ---

def _nofrost_reference() -> nn.Module:
    """What NoFrost's PGDAT.py trains: timm.create_model('nf_resnet26'), weights randomized (gains included)."""
    torch.manual_seed(0)
    model = timm.create_model('nf_resnet26', num_classes=1000)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith('gain'):
                param.uniform_(0.5, 1.5)
            elif name.endswith('bias'):
                param.normal_(0, 0.05)
    return model.eval()


@pytest.fixture(scope='module')
def nofrost(tmp_path_factory):
    folder = tmp_path_factory.mktemp('nofrost')
    model = _nofrost_reference()
    wrapped = nn.DataParallel(model)
    torch.save(wrapped.state_dict(), folder / 'best_RA.pth')
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.save({'epoch': 89, 'model': wrapped.state_dict(), 'optimizer': optimizer.state_dict(),
                'scheduler': torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 90).state_dict(),
                'best_SA': 0.7, 'best_RA': 0.3, 'training_loss': [2.0, 1.5], 'val_SA': [0.5], 'val_RA': [0.2]},
               folder / 'latest.pth')
    return model, folder


@pytest.mark.parametrize('name', ['best_RA.pth', 'latest.pth'])
def test_nofrost_converts_to_stock_nf_resnet(tmp_path, nofrost, name):
    reference, folder = nofrost
    assert _convert('nofrost', folder / name, tmp_path / 'out') == 0
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['architecture'] == 'nf_resnet26'
    assert config['pretrained_cfg']['crop_pct'] == 0.875 and config['pretrained_cfg']['interpolation'] == 'bilinear'
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    x = _images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_nofrost_refuses_a_wrong_architecture_or_leftover_keys(tmp_path, nofrost, capsys):
    _, folder = nofrost
    assert _convert('nofrost', folder / 'best_RA.pth', tmp_path / 'out', '--model', 'nf_resnet50') == 2
    assert 'does not match' in capsys.readouterr().err
    state_dict = torch.load(folder / 'best_RA.pth', weights_only=True)
    state_dict['module.stages.0.0.attn_last.fc.weight'] = torch.zeros(1)
    torch.save(state_dict, tmp_path / 'edited.pth')
    assert _convert('nofrost', tmp_path / 'edited.pth', tmp_path / 'out') == 2
    assert '1 unexpected key (stages.0.0.attn_last.fc.weight)' in capsys.readouterr().err


# --- Feature Denoising: tensorpack ResNet variables, HWIO, BGR input in [-1, 1], TensorFlow SAME padding ---

def _tensorpack_variables(layers, seed: int = 0, suffix: str = '') -> dict:
    """Random variables with the names and shapes of tensorpack's resnet_backbone (ImageNet-Adversarial-Training)."""
    rng = np.random.default_rng(seed)
    arrays = {}

    def conv(name, k, c_in, c_out):
        arrays[f'{name}/W{suffix}'] = (rng.standard_normal((k, k, c_in, c_out)) / math.sqrt(k * k * c_in)).astype(
            np.float32)
        for var, values in (('gamma', rng.uniform(0.5, 1.0, c_out)), ('beta', rng.normal(0, 0.1, c_out)),
                            ('mean/EMA', rng.normal(0, 0.1, c_out)), ('variance/EMA', rng.uniform(0.5, 2.0, c_out))):
            arrays[f'{name}/bn/{var}{suffix}'] = values.astype(np.float32)

    conv('conv0', 7, 3, 64)
    c_in = 64
    for group, (count, width) in enumerate(zip(layers, (64, 128, 256, 512))):
        for block in range(count):
            prefix = f'group{group}/block{block}'
            conv(f'{prefix}/conv1', 1, c_in, width)
            conv(f'{prefix}/conv2', 3, width, width)
            conv(f'{prefix}/conv3', 1, width, width * 4)
            if c_in != width * 4:
                conv(f'{prefix}/convshortcut', 1, c_in, width * 4)
            c_in = width * 4
    arrays[f'linear/W{suffix}'] = (rng.standard_normal((2048, 1000)) * 0.01).astype(np.float32)
    arrays[f'linear/b{suffix}'] = rng.normal(0, 0.1, 1000).astype(np.float32)
    return arrays


def _pad(x: torch.Tensor, k: int, stride: int, same: bool, value: float = 0.0) -> torch.Tensor:
    """TensorFlow SAME padding (extra pixel at the bottom/right) or PyTorch's symmetric k // 2."""
    if not same:
        return F.pad(x, (k // 2,) * 4, value=value)
    pads = []
    for size in (x.shape[-1], x.shape[-2]):
        total = max((math.ceil(size / stride) - 1) * stride + k - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value)


def _tensorpack_forward(arrays: dict, image_bgr: torch.Tensor, layers, same: bool = True) -> torch.Tensor:
    """The original network: image_preprocess (x * 2/255 - 1) then resnet_backbone with BN in inference mode."""
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}

    def conv_bn(x, name, stride=1, relu=True):
        w = t[f'{name}/W']
        x = F.conv2d(_pad(x, w.shape[0], stride, same), w.permute(3, 2, 0, 1), stride=stride)
        scale = t[f'{name}/bn/gamma'] / torch.sqrt(t[f'{name}/bn/variance/EMA'] + 1e-5)
        x = (x - t[f'{name}/bn/mean/EMA'][:, None, None]) * scale[:, None, None] + t[f'{name}/bn/beta'][:, None, None]
        return F.relu(x) if relu else x

    x = image_bgr * (2.0 / 255) - 1.0
    x = conv_bn(x, 'conv0', stride=2)
    x = F.max_pool2d(_pad(x, 3, 2, same, value=-math.inf), 3, 2)
    for group, count in enumerate(layers):
        for block in range(count):
            prefix, stride = f'group{group}/block{block}', (1 if group == 0 or block else 2)
            out = conv_bn(x, f'{prefix}/conv1')
            out = conv_bn(out, f'{prefix}/conv2', stride=stride)
            out = conv_bn(out, f'{prefix}/conv3', relu=False)
            short = conv_bn(x, f'{prefix}/convshortcut', stride, relu=False) if f'{prefix}/convshortcut/W' in t else x
            x = F.relu(out + short)
    return x.mean((2, 3)) @ t['linear/W'] + t['linear/b']


def _rgb_for_timm(image_bgr: torch.Tensor) -> torch.Tensor:
    """What timm's data pipeline feeds the converted model: RGB in [0, 1], normalized with mean = std = 0.5."""
    return (image_bgr.flip(1) / 255 - 0.5) / 0.5


def test_tensorpack_state_dict_reproduces_the_original_network():
    layers = (2, 2, 2, 2)  # ResNet-26: the R152 layout with fewer blocks, same names and shapes
    arrays = _tensorpack_variables(layers)
    assert tensorpack_resnet_layers(arrays) == layers
    model = load_exactly(timm.create_model('resnet26').eval(), tensorpack_resnet_state_dict(arrays), 'synthetic')
    image = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 255
    with torch.no_grad():
        stock = model(_rgb_for_timm(image))
        torch.testing.assert_close(stock, _tensorpack_forward(arrays, image, layers, same=False), atol=1e-4, rtol=1e-4)
        exact = use_tf_same_padding(model)(_rgb_for_timm(image))
    torch.testing.assert_close(exact, _tensorpack_forward(arrays, image, layers, same=True), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(stock, exact, atol=1e-3)  # the padding difference is real on even inputs
    assert set(model.state_dict()) == set(tensorpack_resnet_state_dict(arrays))  # swapped layers keep their keys


def test_tensorpack_npz_converts_to_resnet50_with_tf_padding_applied_on_load(tmp_path):
    layers = (3, 4, 6, 3)
    arrays = _tensorpack_variables(layers, seed=1, suffix=':0')  # dump-model-params.py spelling
    np.savez(tmp_path / 'R50.npz', **arrays, **{'global_step:0': np.array(10), 'conv0/W/Momentum:0':
                                                  np.zeros((7, 7, 3, 64), np.float32)})
    assert _convert('tensorpack-resnet', tmp_path / 'R50.npz', tmp_path / 'out') == 0
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['architecture'] == 'resnet50' and config['timm_advnorm']['padding'] == 'tf_same'
    assert config['pretrained_cfg']['interpolation'] == 'bicubic' and config['pretrained_cfg']['mean'] == [0.5] * 3
    model = create_model_from_name_or_checkpoint(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    image = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 255
    clean = {k[:-2]: v for k, v in arrays.items()}
    with torch.no_grad():
        torch.testing.assert_close(model(_rgb_for_timm(image)), _tensorpack_forward(clean, image, layers),
                                   atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('extra, message', [
    ({'group0_denoise/embedding_theta/W': np.zeros((1, 1, 256, 128), np.float32)}, 'feature-denoising'),
    ({'group0/block0/conv4/W': np.zeros((1, 1, 1, 1), np.float32)}, 'Unexpected tensorpack variable'),
])
def test_tensorpack_rejects_unmapped_variables(tmp_path, capsys, extra, message):
    np.savez(tmp_path / 'bad.npz', **_tensorpack_variables((2, 2, 2, 2)), **extra)
    assert _convert('tensorpack-resnet', tmp_path / 'bad.npz', tmp_path / 'out', '--model', 'resnet26') == 2
    assert message in capsys.readouterr().err


def test_tensorpack_reader_drops_the_tensor_suffix_and_training_variables(tmp_path):
    np.savez(tmp_path / 'v.npz', **{'conv0/W:0': np.zeros((7, 7, 3, 64), np.float32), 'learning_rate:0': 0.1,
                                    'EMA/cost': 1.0, 'linear/W/Momentum:0': np.zeros(1)})
    assert list(read_tensorpack_npz(tmp_path / 'v.npz')) == ['conv0/W']


# --- the wrong kind of file, and usage errors ---

def test_each_converter_says_what_a_source_of_another_format_is(tmp_path, fast_advprop, nofrost, capsys):
    """A file of another release fails on what it is, not on a layout the converter could not find in it."""
    _, fast_src = fast_advprop
    _, nofrost_folder = nofrost
    np.savez(tmp_path / 'other.npz', weights=np.zeros(4, np.float32))
    torch.save(timm.create_model('test_resnet').state_dict(), tmp_path / 'resnet.pth')
    cases = [
        ('tensorpack-resnet', fast_src, 'not an npz archive (as tensorpack writes): a torch.save file'),
        ('tensorpack-resnet', tmp_path / 'other.npz', 'no "group*/block*" variables: not a tensorpack ResNet'),
        ('nofrost', tmp_path / 'resnet.pth', 'No "stages.*" keys: not the weights of a timm NF-ResNet'),
        ('nofrost', tmp_path / 'other.npz', 'not a checkpoint: a numpy .npz archive'),
        ('fast-advprop', nofrost_folder / 'best_RA.pth', 'not a Fast AdvProp mixture-BN checkpoint'),
    ]
    for fmt, src, message in cases:
        assert _convert(fmt, src, tmp_path / 'out') == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith('timm-advnorm-convert: error:') and message in err[0], err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('argv, message', [
    (['nofrost', 'src'], 'the following arguments are required: DST (see timm-advnorm-convert nofrost --help)'),
    (['fast-advprop', 'a', 'b', '--branch', 'both'],
     "argument --branch: invalid choice: 'both' (choose from 'clean', 'adv') "
     '(see timm-advnorm-convert fast-advprop --help)'),
    (['tensorpack-resnet', 'a', 'b', '--bogus'], 'unrecognized arguments: --bogus (see --help)'),
    ([], 'the following arguments are required: FORMAT (see --help)'),
])
def test_usage_errors_are_one_line_of_the_command_even_in_a_sub_command(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _convert(*argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'timm-advnorm-convert: error: {message}'], err
