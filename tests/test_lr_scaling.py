"""The learning rate scales with the global batch as timm's train.py computes it (`resolve_lr`)."""
import math

import pytest

from timm_advnorm.train.lr_scaling import default_lr_base_scale, global_batch_size, resolve_lr


def timm_train_py_lr(lr, lr_base, lr_base_size, lr_base_scale, opt, batch_size, world_size, grad_accum_steps):
    """timm 1.0's train.py, transcribed statement by statement (the reference the module must match)."""
    if not lr:
        global_batch = batch_size * world_size * grad_accum_steps
        batch_ratio = global_batch / lr_base_size
        if not lr_base_scale:
            on = opt.lower()
            lr_base_scale = 'sqrt' if any([o in on for o in ('ada', 'lamb')]) else 'linear'
        if lr_base_scale == 'sqrt':
            batch_ratio = batch_ratio ** 0.5
        lr = lr_base * batch_ratio
    return lr


@pytest.mark.parametrize('opt', ['sgd', 'momentum', 'adamw', 'AdamW', 'lamb', 'nadam', 'adagrad', 'lars', 'rmsprop'])
@pytest.mark.parametrize('scale', ['', 'linear', 'sqrt'])
@pytest.mark.parametrize('batch,world,accum', [(4, 1, 1), (32, 128, 1), (32, 8, 16), (64, 3, 2), (256, 1, 1)])
def test_scaled_rate_matches_timm(opt, scale, batch, world, accum):
    expected = timm_train_py_lr(None, 0.1, 256, scale, opt, batch, world, accum)
    resolved = resolve_lr(None, 0.1, 256, scale, opt, global_batch_size(batch, world, accum))
    assert resolved.lr == pytest.approx(expected, rel=1e-12)
    assert resolved.global_batch == batch * world * accum
    assert resolved.scale == (scale or default_lr_base_scale(opt))


def test_the_issue_example_batch_4_no_longer_trains_at_0_1():
    """Batch 4 on one process at timm's defaults: 0.1 * 4 / 256, not 0.1 used as is."""
    resolved = resolve_lr(None, 0.1, 256, '', 'sgd', global_batch_size(4))
    assert resolved.lr == pytest.approx(0.0015625)
    assert 'linear' in resolved.describe() and '(4)' in resolved.describe()


def test_recipe_batch_gives_the_paper_rate_on_any_number_of_processes():
    """Xie & Yuille: 0.1 at 4096 images, reached by 128 x 32 or by 8 x 32 x 16 accumulated micro-batches."""
    for world, accum in ((128, 1), (8, 16)):
        assert resolve_lr(None, 0.1, 4096, '', 'sgd', global_batch_size(32, world, accum)).lr == pytest.approx(0.1)
    assert resolve_lr(None, 0.1, 4096, '', 'sgd', global_batch_size(32, 8, 1)).lr == pytest.approx(0.1 / 16)


def test_sqrt_scaling_for_adaptive_optimizers():
    resolved = resolve_lr(None, 1e-3, 256, '', 'adamw', 1024)
    assert resolved.scale == 'sqrt' and resolved.lr == pytest.approx(1e-3 * math.sqrt(4))


def test_explicit_lr_is_used_as_given():
    resolved = resolve_lr(0.3, 0.1, 256, '', 'sgd', 4)
    assert resolved.lr == 0.3 and resolved.scale == '' and resolved.lr_base is None
    assert 'as given' in resolved.describe()
    assert resolved.describe(resumed='run/last.pth.tar') == (
        'Learning rate 0.3 as run/last.pth.tar records it, global batch 4.')


@pytest.mark.parametrize('kwargs,message', [
    (dict(lr_base_scale='log'), '--lr-base-scale'),
    (dict(lr_base_size=0), '--lr-base-size'),
])
def test_bad_inputs_are_value_errors(kwargs, message):
    arguments = dict(lr=None, lr_base=0.1, lr_base_size=256, lr_base_scale='', opt='sgd', global_batch=64)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        resolve_lr(**arguments)
