"""DeepAugment: the original's layer layout, distortions, weights checks, seeded outputs, resumable folder generation.

Untrained networks (``allow_random_weights=True``) stand in for the original weights, which are not downloaded.
"""
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from timm_advnorm.augment import (
    NETS, DeepAugment, DeepAugmentRng, build_net, generate_deepaugment_folder, load_deepaugment_weights,
    perturb_weights)
from timm_advnorm.augment import deepaugment as da
from timm_advnorm.augment import deepaugment_nets as nets
from timm_advnorm.commands import deepaugment
from timm_advnorm.commands.deepaugment import run

PARTIAL = '.deepaugment-partial-'


def _images(n: int = 2, height: int = 32, width: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, height, width, generator=torch.Generator().manual_seed(seed))


def _augment(net: str, seed: int = 0) -> DeepAugment:
    return DeepAugment(net, seed=seed, allow_random_weights=True)


# ----------------------------------------------------------------------------------------------------------------
# Architectures: the original state dict layouts


def test_cae_has_the_original_state_dict_keys_in_order():
    keys = list(build_net('cae').state_dict())
    assert len(keys) == 42 and keys[:4] == ['e_conv_1.1.weight', 'e_conv_1.1.bias', 'e_conv_2.1.weight',
                                            'e_conv_2.1.bias']
    assert [k[:-len('.weight')] for k in keys if k.endswith('.weight')] == list(da._CAE_LAYERS)
    shapes = build_net('cae').state_dict()
    assert shapes['e_conv_3.0.weight'].shape == (32, 128, 5, 5)
    assert shapes['d_up_conv_1.3.weight'].shape == (64, 128, 2, 2)  # ConvTranspose2d: (in, out, k, k)
    assert shapes['d_up_conv_3.3.weight'].shape == (3, 16, 3, 3)


def test_edsr_has_the_baseline_x4_state_dict_keys():
    state = build_net('edsr').state_dict()
    assert len(state) == 78
    assert state['head.0.weight'].shape == (64, 3, 3, 3)
    assert state['body.15.body.2.weight'].shape == (64, 64, 3, 3) and state['body.16.weight'].shape == (64, 64, 3, 3)
    assert state['tail.0.0.weight'].shape == state['tail.0.2.weight'].shape == (256, 64, 3, 3)
    assert state['tail.1.weight'].shape == (3, 64, 3, 3)
    assert torch.allclose(state['sub_mean.bias'], -255 * torch.tensor([0.4488, 0.4371, 0.4040]))


# ----------------------------------------------------------------------------------------------------------------
# On the fly


@pytest.mark.parametrize('net', NETS)
def test_batch_keeps_shape_dtype_device_and_range_and_changes(net):
    x = _images()
    out = _augment(net)(x)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert out.min() >= 0 and out.max() <= 1
    assert (out - x).abs().mean() > 0.01


@pytest.mark.parametrize('net', NETS)
def test_sizes_not_multiple_of_4_and_half_precision(net):
    x = _images(1, 30, 22).half()
    out = _augment(net)(x)
    assert out.shape == x.shape and out.dtype == torch.float16


def test_native_scale_cae_keeps_size_and_edsr_upscales_4x():
    assert _augment('cae').distort(_images(1, 28, 20)).shape == (1, 3, 28, 20)
    assert _augment('edsr').distort(_images(1, 8, 6)).shape == (1, 3, 32, 24)


@pytest.mark.parametrize('net', NETS)
def test_same_seed_same_sequence_other_seed_other_output(net):
    x = _images()
    a, b = _augment(net, seed=1), _augment(net, seed=1)
    first, second = a(x), a(x)
    assert torch.equal(first, b(x)) and torch.equal(second, b(x))
    assert not torch.equal(first, second)  # new distortions every call
    assert not torch.equal(first, _augment(net, seed=2)(x))
    assert torch.equal(a.manual_seed(1)(x), first)


def test_seed_none_follows_torch_global_rng():
    x = _images()
    torch.manual_seed(5)
    first = DeepAugment('cae', allow_random_weights=True)(x)
    torch.manual_seed(5)
    assert torch.equal(DeepAugment('cae', allow_random_weights=True)(x), first)


def test_refuses_what_is_not_a_batch_of_rgb_images():
    with pytest.raises(ValueError, match=r'\(B, 3, H, W\)'):
        _augment('cae')(torch.rand(3, 32, 32))
    with pytest.raises(ValueError, match='Unknown DeepAugment network'):
        DeepAugment('unet', allow_random_weights=True)


# ----------------------------------------------------------------------------------------------------------------
# Weights


def test_untrained_network_needs_explicit_permission():
    with pytest.raises(ValueError, match='needs the pretrained weights.*allow_random_weights=True'):
        DeepAugment('cae')


def test_missing_weights_file(tmp_path):
    with pytest.raises(FileNotFoundError, match='DeepAugment EDSR weights not found'):
        DeepAugment('edsr', tmp_path / 'edsr_baseline_x4.pt')


@pytest.mark.parametrize('net', NETS)
def test_original_layout_weights_load(tmp_path, net):
    state = {k: torch.randn_like(v) for k, v in build_net(net).state_dict().items()}
    torch.save({f'module.{k}': v for k, v in state.items()}, tmp_path / 'w.pt')
    loaded = load_deepaugment_weights(net, tmp_path / 'w.pt')
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert DeepAugment(net, tmp_path / 'w.pt', seed=0)(_images()).shape == (2, 3, 32, 32)


def test_edsr_weights_without_the_constant_mean_shifts_load(tmp_path):
    state = {k: v for k, v in build_net('edsr').state_dict().items() if 'mean' not in k}
    torch.save(state, tmp_path / 'w.pt')
    assert torch.allclose(load_deepaugment_weights('edsr', tmp_path / 'w.pt')['add_mean.bias'],
                          255 * torch.tensor([0.4488, 0.4371, 0.4040]))


def test_weights_of_another_network_are_refused(tmp_path):
    torch.save(build_net('cae').state_dict(), tmp_path / 'cae.state')
    with pytest.raises(ValueError, match=r'does not hold the DeepAugment EDSR weights: \d+ missing keys '
                                         r'\(head.0.weight, head.0.bias, body.0.body.0.weight and \d+ more\); '
                                         r'\d+ unexpected keys \(e_conv_1'):
        DeepAugment('edsr', tmp_path / 'cae.state')


def test_mis_shaped_and_non_weight_files_are_refused(tmp_path):
    state = build_net('cae').state_dict()
    state['e_conv_3.0.weight'] = torch.zeros(16, 128, 5, 5)
    torch.save(state, tmp_path / 'narrow.state')
    with pytest.raises(ValueError, match=r'1 mis-shaped key \(e_conv_3.0.weight 16x128x5x5 vs 32x128x5x5\)'):
        load_deepaugment_weights('cae', tmp_path / 'narrow.state')
    (tmp_path / 'notes.txt').write_text('not weights\n')
    with pytest.raises(ValueError, match='not a checkpoint'):
        load_deepaugment_weights('cae', tmp_path / 'notes.txt')
    torch.save({'epoch': torch.tensor(3), 'names': ['a']}, tmp_path / 'other.pt')
    with pytest.raises(ValueError, match='not a state dict'):
        load_deepaugment_weights('cae', tmp_path / 'other.pt')


# ----------------------------------------------------------------------------------------------------------------
# Distortions


@pytest.mark.parametrize('net', NETS)
def test_weight_distortion_changes_a_copy_and_keeps_shapes(net):
    clean = build_net(net).state_dict()
    before = {k: v.clone() for k, v in clean.items()}
    rng = DeepAugmentRng(0)
    for _ in range(5):
        distorted = perturb_weights(net, clean, rng)
        assert any(not torch.equal(distorted[k], clean[k]) for k in clean)
        assert all(distorted[k].shape == clean[k].shape for k in clean)
    assert all(torch.equal(clean[k], before[k]) for k in clean)


@pytest.mark.parametrize('option', range(len(da._CAE_WEIGHT_DISTORTIONS)))
def test_each_cae_weight_distortion_runs_on_its_layers(option):
    clean = build_net('cae').state_dict()
    layers = da._CAE_OPTION_LAYERS.get(option, da._CAE_DEFAULT_LAYERS)
    rng = DeepAugmentRng(option)
    for layer in layers:
        state = dict(clean)
        da._CAE_WEIGHT_DISTORTIONS[option](state, da._CAE_LAYERS[layer], da._CAE_LAYERS[layers[0]], rng)
        assert all(state[k].shape == clean[k].shape for k in clean)
        assert not torch.equal(state[f'{da._CAE_LAYERS[layer]}.weight'], clean[f'{da._CAE_LAYERS[layer]}.weight'])


@pytest.mark.parametrize('option', range(len(da._EDSR_WEIGHT_DISTORTIONS)))
def test_each_edsr_weight_distortion_changes_the_body(option):
    clean = build_net('edsr').state_dict()
    state = dict(clean)
    da._EDSR_WEIGHT_DISTORTIONS[option](state, DeepAugmentRng(option))
    changed = [k for k in clean if not torch.equal(state[k], clean[k])]
    assert changed and all(k.startswith('body.') for k in changed)
    assert all(state[k].shape == clean[k].shape for k in clean)


@pytest.mark.parametrize('option', sorted(nets._CAE_CODE_DISTORTIONS))
def test_each_cae_code_distortion_keeps_shape_and_changes_the_code(option):
    code = torch.tanh(torch.randn(2, 32, 8, 8, generator=torch.Generator().manual_seed(0)))
    out = nets._CAE_CODE_DISTORTIONS[option](code, DeepAugmentRng(option))
    assert out.shape == code.shape and not torch.equal(out, code)


@pytest.mark.parametrize('option, rate', [(2, 0.05), (3, 0.025)])
def test_edsr_pre_distortion_rates(option, rate):
    """Pre-distortion 2 zeroes and 3 negates a fraction of the activations (``round(rand + 0.45)``, ``+ 0.475``)."""
    x = torch.ones(4, 64, 32, 32)
    out = nets._EDSR_PRE_DISTORTIONS[option](x, DeepAugmentRng(0))
    assert float((out != x).float().mean()) == pytest.approx(rate, abs=0.005)


def test_edsr_channel_swap_copies_as_the_original():
    x = torch.arange(64.0).view(1, 64, 1, 1)
    out = nets._copy_channels(x, DeepAugmentRng(0))
    assert set(out.flatten().tolist()) <= set(range(64)) and len(set(out.flatten().tolist())) < 64


@pytest.mark.parametrize('option', sorted(nets._EDSR_BODY_DISTORTIONS))
def test_each_edsr_body_distortion_keeps_shape(option):
    body = build_net('edsr').body
    x = torch.randn(1, 64, 6, 6)
    assert nets._EDSR_BODY_DISTORTIONS[option](body, x, DeepAugmentRng(0)).shape == x.shape


# ----------------------------------------------------------------------------------------------------------------
# Offline generation


@pytest.fixture()
def src(tmp_path):
    """Two class folders with a PNG and a JPEG each (24×20), plus a non-image file."""
    root = tmp_path / 'src'
    rng = np.random.default_rng(0)
    for cls in ('n01', 'n02'):
        (root / cls).mkdir(parents=True)
        for name in ('a.png', 'b.JPEG'):
            Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(root / cls / name)
    (root / 'n01' / 'notes.txt').write_text('not an image')
    return root


def _files(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob('*')) if p.is_file()}


def _generate(src, dst, **kwargs):
    kwargs = {'net': 'cae', 'weights': None, 'seed': 0, 'input_size': 16, 'allow_random_weights': True, **kwargs}
    return generate_deepaugment_folder(src, dst, **kwargs)


def test_folder_copy_has_every_image_at_the_native_scale(src, tmp_path):
    summary = _generate(src, tmp_path / 'cae')
    assert (summary.written, summary.skipped) == (4, 0)
    files = _files(tmp_path / 'cae')
    assert sorted(files) == ['n01/a.png', 'n01/b.JPEG', 'n02/a.png', 'n02/b.JPEG']
    with Image.open(tmp_path / 'cae' / 'n01' / 'a.png') as image:
        assert image.size == (19, 16) and image.mode == 'RGB'  # shorter side 16, as Resize(16)
    with Image.open(tmp_path / 'cae' / 'n02' / 'b.JPEG') as image:
        assert image.format == 'JPEG'
    _generate(src, tmp_path / 'edsr', net='edsr', input_size=5)
    with Image.open(tmp_path / 'edsr' / 'n01' / 'a.png') as image:
        assert image.size == (24, 20)  # EDSR ×4 of a 6×5 input


def test_same_seed_same_bytes_other_seed_other_bytes(src, tmp_path):
    _generate(src, tmp_path / 'one')
    _generate(src, tmp_path / 'two')
    _generate(src, tmp_path / 'three', seed=1)
    assert _files(tmp_path / 'one') == _files(tmp_path / 'two')
    assert _files(tmp_path / 'one')['n01/a.png'] != _files(tmp_path / 'three')['n01/a.png']


def test_second_run_writes_nothing(src, tmp_path):
    dst = tmp_path / 'dst'
    _generate(src, dst)
    stamps = {p: p.stat().st_mtime_ns for p in dst.rglob('*')}
    summary = _generate(src, dst)
    assert (summary.written, summary.skipped) == (0, 4)
    assert {p: p.stat().st_mtime_ns for p in dst.rglob('*')} == stamps


def test_interrupted_run_leaves_no_partial_file_and_resumes_to_the_same_images(src, tmp_path, monkeypatch):
    _generate(src, tmp_path / 'whole')
    dst = tmp_path / 'dst'
    real_save, calls = Image.Image.save, []

    def dying_save(self, fp, *args, **kwargs):
        calls.append(fp)
        if len(calls) == 3:  # the process dies half-way through writing the third image
            with open(fp, 'wb') as f:
                f.write(b'\x89PNG partial')
            raise KeyboardInterrupt
        return real_save(self, fp, *args, **kwargs)

    monkeypatch.setattr(Image.Image, 'save', dying_save)
    with pytest.raises(KeyboardInterrupt):
        _generate(src, dst)
    monkeypatch.setattr(Image.Image, 'save', real_save)
    assert sorted(_files(dst)) == ['n01/a.png', 'n01/b.JPEG']
    (dst / 'n02').mkdir(exist_ok=True)
    (dst / 'n02' / f'{PARTIAL}999-a.png').write_bytes(b'left by a killed run')
    summary = _generate(src, dst)
    assert (summary.written, summary.skipped) == (2, 2)
    assert _files(dst) == _files(tmp_path / 'whole')


def test_bad_folders_are_refused(src, tmp_path):
    with pytest.raises(FileNotFoundError, match='Source folder not found'):
        _generate(tmp_path / 'nowhere', tmp_path / 'dst')
    with pytest.raises(ValueError, match='lies inside the source'):
        _generate(src, src / 'n01' / 'augmented')
    (tmp_path / 'empty').mkdir()
    with pytest.raises(ValueError, match='No image'):
        _generate(tmp_path / 'empty', tmp_path / 'dst')


def test_unreadable_source_image_is_named(src, tmp_path):
    (src / 'n02' / 'c.png').write_bytes(b'not a png')
    with pytest.raises(OSError, match='cannot read image .*c.png'):
        _generate(src, tmp_path / 'dst')


# ----------------------------------------------------------------------------------------------------------------
# Command line


def test_command_line_generates(src, tmp_path):
    dst = tmp_path / 'dst'
    argv = [str(src), str(dst), '--net', 'cae', '--allow-random-weights', '--input-size', '16', '--device', 'cpu',
            '--no-progress']
    assert run(argv=argv) == 0
    assert len(_files(dst)) == 4


@pytest.mark.parametrize('extra, message', [
    ([], 'DeepAugment CAE needs the pretrained weights'),
    (['--weights', 'missing.state'], 'DeepAugment CAE weights not found: missing.state'),
    (['--allow-random-weights', '--input-size', '0'], 'input_size must be a positive number of pixels, got 0'),
])
def test_command_line_bad_input_is_one_line(src, tmp_path, capsys, extra, message):
    assert run(argv=[str(src), str(tmp_path / 'dst'), '--net', 'cae', '--no-progress', *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f'{deepaugment.PROG}: error: {message}'), err


def test_command_line_usage_error_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run(argv=['a', 'b', '--net', 'unet'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{deepaugment.PROG}: error: argument --net: invalid choice: 'unet' (choose from 'cae', 'edsr') "
                   f'(see --help)'], err


def test_module_runs_as_a_script_without_warnings():
    command = [sys.executable, '-W', 'error::RuntimeWarning', '-m', 'timm_advnorm.commands.deepaugment', '--help']
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('usage: python -m timm_advnorm.commands.deepaugment') and not result.stderr
