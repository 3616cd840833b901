"""Training methods: each trains end to end, Fast AdvProp's ingredients match their definitions, MBN isolates stats."""
import copy
import os
import socket

import pytest
import timm
import torch
import torch.multiprocessing as mp
import torch.nn as nn
from timm.data import Mixup

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace, create_attack
from timm_advnorm.layers import MixtureBatchNorm2d, route
from timm_advnorm.task import (
    TASKS, FastAdvPropTask, MbnTask, create_task, parameter_groups, shuffle_across_ranks, use_running_statistics)

NUM_CLASSES = 10
SPACE = InputSpace()


def _batch(n: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = SPACE.from_pixels(torch.rand(n, 3, 32, 32, generator=g))
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    return x, y


def _model(name: str = 'test_mbn_resnet') -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, num_classes=NUM_CLASSES)


def _attack(steps: int = 2):
    return create_attack('pgd', space=SPACE, eps=8.0, step=2.0, steps=steps, targeted=True, best_iterate=False,
                         clean_start_prob=0.2, seed=0)


def _make_task(method: str, model: nn.Module, mixup: bool):
    mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=NUM_CLASSES) if mixup else None
    kwargs = dict(mixup_fn=mixup_fn, criterion_kwargs=dict(soft_targets=mixup))
    if method == 'fast_advprop':
        return create_task(method, model, space=SPACE, eps=1.0, num_classes=NUM_CLASSES, **kwargs)
    return create_task(method, model, attack=_attack(), **kwargs)


@pytest.mark.parametrize('mixup', [False, True], ids=['plain', 'mixup'])
@pytest.mark.parametrize('method', sorted(TASKS))
def test_every_method_trains_a_few_steps(method, mixup):
    model = _model('test_nfr_resnet' if method == 'nofrost' else 'test_mbn_resnet')
    task = _make_task(method, model, mixup)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    before = copy.deepcopy(model.state_dict())
    task.train()
    x, y = _batch(10 if method == 'fast_advprop' else 8)
    for _ in range(2):
        optimizer.zero_grad()
        result = task(x, y)
        result['loss'].backward()
        task.finalize_gradients()
        optimizer.step()
        assert torch.isfinite(result['loss'])
        assert result['output'].shape[-1] == NUM_CLASSES
        assert any(k.startswith('loss_') for k in result)
    changed = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert changed, 'training did not change any weight'
    assert task.passes_per_image >= 1.0


def test_cost_model_in_passes_per_image():
    attack = _attack(steps=30)
    model = _model()
    assert create_task('vanilla', model).passes_per_image == 1
    assert create_task('madry', model, attack=attack).passes_per_image == 31
    assert create_task('mixed', model, attack=attack, clean_ratio=0.4).passes_per_image == pytest.approx(31.4)
    assert create_task('mbn', model, attack=attack).passes_per_image == 32
    fast = create_task('fast_advprop', model, space=SPACE, p_adv=0.2, steps=1)
    assert fast.passes_per_image == pytest.approx(1.2)
    assert fast.batch_scale == pytest.approx(1.25)


def test_mbn_and_nofrost_reject_the_wrong_model():
    with pytest.raises(ValueError, match='mixture-BN'):
        create_task('mbn', timm.create_model('resnet10t', num_classes=NUM_CLASSES), attack=_attack())
    with pytest.raises(ValueError, match='normalizer-free'):
        create_task('nofrost', _model(), attack=_attack())
    with pytest.raises(ValueError, match='Unknown method'):
        create_task('free_lunch', _model())


def _bn_stats(model: nn.Module, branch: str):
    out = []
    for m in model.modules():
        if isinstance(m, MixtureBatchNorm2d):
            bn = m if branch == 'clean' else m.adv_bn
            out.append(torch.cat([bn.running_mean, bn.running_var]))
    return out


@pytest.mark.parametrize('memory_format', [torch.contiguous_format, torch.channels_last],
                         ids=['interleaved', 'channels_last_split'])
def test_mbn_rows_update_only_their_own_statistics(memory_format):
    """Each branch sees only its own rows, whichever fused layout the batch's memory format selects, and the loss
    is the clean/adversarial mixture of the separate forwards."""
    model = _model().to(memory_format=memory_format)
    task = MbnTask(model, attack=_attack())
    x, y = _batch()
    x_adv = SPACE.clamp(x + 0.3 * torch.randn_like(x)).contiguous(memory_format=memory_format)
    x = x.contiguous(memory_format=memory_format)
    task.adversarial = lambda input, target, branch=None: x_adv  # a fixed "attack" makes the reference exact
    reference_clean, reference_adv = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    task.train()
    loss = task(x, y)['loss']
    with torch.no_grad(), route(reference_clean, 'clean'):
        loss_clean = nn.functional.cross_entropy(reference_clean(x), y)
    with torch.no_grad(), route(reference_adv, 'adv'):
        loss_adv = nn.functional.cross_entropy(reference_adv(x_adv), y)
    torch.testing.assert_close(loss, 0.5 * loss_clean + 0.5 * loss_adv, rtol=1e-4, atol=1e-5)
    for got, want in zip(_bn_stats(model, 'clean'), _bn_stats(reference_clean, 'clean')):
        torch.testing.assert_close(got, want)
    for got, want in zip(_bn_stats(model, 'adv'), _bn_stats(reference_adv, 'adv')):
        torch.testing.assert_close(got, want)
    # and each reference run left the other branch's statistics at their initial values
    for got, want in zip(_bn_stats(reference_clean, 'adv'), _bn_stats(_model(), 'adv')):
        torch.testing.assert_close(got, want)


def test_running_statistics_freeze_bn_during_training():
    model = _model()
    task = create_task('madry', model, attack=_attack())
    task.train()
    assert use_running_statistics(model) > 0
    stats = [b.clone() for n, b in model.named_buffers() if 'running' in n]
    task(*_batch())['loss'].backward()
    assert all(torch.equal(a, b) for a, b in zip(stats, [b for n, b in model.named_buffers() if 'running' in n]))


def _fast_task(model, rescale: bool, delta: torch.Tensor) -> FastAdvPropTask:
    task = FastAdvPropTask(model, space=SPACE, eps=4.0, p_adv=0.2, rescale_grads=rescale)
    task._random_start = lambda x, generator: delta
    return task


def test_fast_advprop_reuses_attack_gradients_exactly():
    x, y = _batch(10)
    n_clean = 8
    delta = 0.5 * SPACE.linf_budget(4.0, x) * torch.sign(torch.randn(2, 3, 32, 32, generator=torch.Generator()
                                                                          .manual_seed(1)))
    model = _model()
    reference = copy.deepcopy(model)
    task = _fast_task(model, rescale=False, delta=delta)
    task.train()
    result = task(x, y)
    reused_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    # Reference: the clean + noisy loss back-propagated on its own, and PGD-1's step from that input gradient.
    reference.train()
    x_noisy = SPACE.clamp(x[n_clean:] + delta).requires_grad_(True)
    with route(reference, 'split', n_clean=n_clean):
        out = reference(torch.cat([x[:n_clean], x_noisy]))
    loss = nn.functional.cross_entropy(out[:n_clean], y[:n_clean]) + 0.5 * nn.functional.cross_entropy(
        out[n_clean:], y[n_clean:])
    loss.backward()
    for name, p in reference.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(reused_grads[name], p.grad, rtol=1e-5, atol=1e-6)
    eps = SPACE.linf_budget(4.0, x)
    expected_delta = torch.clamp(SPACE.clamp(x[n_clean:] + delta) - x[n_clean:] + eps * x_noisy.grad.sign(),
                                 min=-eps, max=eps)
    x_adv_expected = SPACE.clamp(x[n_clean:] + expected_delta)
    with torch.no_grad(), route(reference, 'adv'):
        expected_adv_loss = nn.functional.cross_entropy(reference(x_adv_expected), y[n_clean:])
    torch.testing.assert_close(result['loss_adv'], expected_adv_loss, rtol=1e-4, atol=1e-5)


def test_fast_advprop_gradient_rescaling_matches_the_group_formula():
    x, y = _batch(10)
    delta = torch.zeros(2, 3, 32, 32)
    grads = {}
    for rescale in (False, True):
        model = _model()
        task = _fast_task(model, rescale=rescale, delta=delta)
        task.train()
        task(x, y)['loss'].backward()
        task.finalize_gradients()
        grads[rescale] = {id_: p.grad.clone() for id_, p in enumerate(model.parameters())}
        groups = {name: {id(p) for p in params} for name, params in parameter_groups(model).items()}
        index_of = {id(p): i for i, p in enumerate(model.parameters())}
        scales = task.group_scales
    assert scales == pytest.approx({'shared': 0.5, 'clean': 1.0, 'adv': 1.0})
    for name, ids in groups.items():
        assert ids, f'empty parameter group {name}'
        for pid in ids:
            i = index_of[pid]
            torch.testing.assert_close(grads[True][i], grads[False][i] * scales[name])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _shuffle_worker(rank: int, world_size: int, port: int, out_dir: str):
    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world_size)
    rows = torch.arange(rank * 6, rank * 6 + 6, dtype=torch.float32).view(6, 1).repeat(1, 3)
    labels = torch.arange(rank * 6, rank * 6 + 6)
    x, y = shuffle_across_ranks((rows, labels), seed=123)
    torch.save({'x': x, 'y': y}, os.path.join(out_dir, f'rank{rank}.pt'))
    dist.destroy_process_group()


def test_shuffle_bn_permutation_is_shared_and_lossless(tmp_path):
    mp.spawn(_shuffle_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f'rank{r}.pt') for r in range(2)]
    rows = torch.cat([p['x'][:, 0] for p in parts]).long()
    labels = torch.cat([p['y'] for p in parts])
    assert sorted(rows.tolist()) == list(range(12)), 'a row was lost or duplicated'
    assert torch.equal(rows, labels), 'rows and their targets were separated'
    assert rows.tolist() != list(range(12)), 'nothing was shuffled'
    expected = torch.randperm(12, generator=torch.Generator().manual_seed(123))
    assert torch.equal(rows, expected), 'ranks did not use the one shared permutation'
