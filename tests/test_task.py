"""Training methods: each trains end to end, Fast AdvProp's ingredients match their definitions, MBN isolates stats."""
import copy
import os

import pytest
import timm
import torch
import torch.multiprocessing as mp
import torch.nn as nn
from ports import free_port
from timm.data import Mixup

import timm_advnorm  # noqa: F401
from timm_advnorm.attacks import InputSpace, attack_context, create_attack, pgd
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
    if method == 'nofrost_star':
        from timm_advnorm.augment.deepaugment import DeepAugment
        return create_task(method, model, attack=_attack(), space=SPACE,
                           deepaugment=DeepAugment('cae', seed=0, allow_random_weights=True), **kwargs)
    return create_task(method, model, attack=_attack(), **kwargs)


@pytest.mark.parametrize('mixup', [False, True], ids=['plain', 'mixup'])
@pytest.mark.parametrize('method', sorted(TASKS))
def test_every_method_trains_a_few_steps(method, mixup):
    model = _model('test_nfr_resnet' if method.startswith('nofrost') else 'test_mbn_resnet')
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


def _reaches(params) -> bool:
    return any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)


@pytest.mark.parametrize('method, branches', [
    ('vanilla', ('clean',)), ('madry', ('clean',)), ('mixed', ('clean',)), ('alp', ('clean',)),
    ('mbn', ('clean', 'adv')), ('fast_advprop', ('clean', 'adv'))])
def test_validated_branches_are_those_a_training_step_reaches(method, branches):
    """A single-route method leaves the adversarial BN of a mixture-BN model untouched: validating it would log, and
    rank checkpoints by, accuracies of weights that never trained."""
    model = _model()
    task = _make_task(method, model, mixup=False)
    assert task.validated_branches == branches
    task.train()
    task(*_batch(10))['loss'].backward()
    groups = parameter_groups(model)
    assert _reaches(groups['clean']) == ('clean' in branches)
    assert _reaches(groups['adv']) == ('adv' in branches)


def test_a_model_without_mixture_bn_validates_its_clean_route_only():
    assert create_task('nofrost', _model('test_nfr_resnet'), attack=_attack()).validated_branches == ('clean',)
    assert create_task('madry', _model('test_resnet'), attack=_attack()).validated_branches == ('clean',)


@pytest.mark.parametrize('method, metric', [
    ('vanilla', 'top1'), ('madry', 'robust_top1'), ('mixed', 'robust_top1'), ('alp', 'robust_top1'),
    ('nofrost', 'robust_top1'), ('mbn', 'adv_branch_robust_top1'), ('fast_advprop', 'top1')])
def test_default_eval_metric_is_what_the_methods_papers_report(method, metric):
    """Xie & Yuille report robustness (of the adversarial branch for MBN_adv); AdvProp and Fast AdvProp infer on
    the clean branch and report clean accuracy; vanilla training is ranked by clean accuracy."""
    assert TASKS[method].default_eval_metric == metric


@pytest.mark.parametrize('method, kwargs, parts', [
    ('vanilla', {}, set()),
    ('madry', {}, set()),
    ('mixed', {}, {'loss_clean', 'loss_adv'}),
    ('mixed', {'clean_ratio': 0.0}, set()),
    ('alp', {}, {'loss_clean', 'loss_adv', 'loss_pair'}),
    ('mbn', {}, {'loss_clean', 'loss_adv'}),
    ('fast_advprop', {}, {'loss_total', 'loss_clean', 'loss_noise', 'loss_adv'}),
], ids=['vanilla', 'madry', 'mixed', 'mixed_no_clean', 'alp', 'mbn', 'fast_advprop'])
def test_no_loss_part_repeats_the_whole_loss(method, kwargs, parts):
    """A part that is the whole loss by construction (vanilla's clean loss, Madry's adversarial loss) is not
    returned beside it, so the logs and summary.csv hold each quantity once."""
    model = _model()
    task = (create_task(method, model, space=SPACE, eps=1.0) if method == 'fast_advprop'
            else create_task(method, model, attack=_attack(), **kwargs))
    task.train()
    result = task(*_batch(10))
    assert {k for k in result if k.startswith('loss_')} == parts


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


def _group_of_each_parameter(model: nn.Module):
    group_of = {id(p): group for group, params in parameter_groups(model).items() for p in params}
    return {name: group_of[id(p)] for name, p in model.named_parameters()}


def _released_code_gradients(model: nn.Module, x, y, n_clean: int, delta: torch.Tensor, eps: float):
    """One Fast AdvProp step as its released code computes it, written out independently of the task.

    Per-sample losses are summed with weights clean 1, noisy 0.5 and adversarial 0.5, each pass back-propagated on
    its own (clean, then the attack's pass whose parameter gradients are reused, then the adversarial one), and
    every parameter's gradient divided by the summed weight of the rows that reached it (``_params_count``).
    Returns the divided gradients by parameter name and the mean adversarial loss.
    """
    ce_sum = nn.CrossEntropyLoss(reduction='sum')
    x_clean, y_clean, x_att, y_att = x[:n_clean], y[:n_clean], x[n_clean:], y[n_clean:]
    model.train()
    with route(model, 'clean'):
        ce_sum(model(x_clean), y_clean).backward()
    x_noisy = SPACE.clamp(x_att + delta).requires_grad_(True)
    with route(model, 'adv'):
        (0.5 * ce_sum(model(x_noisy), y_att)).backward()
    budget = SPACE.linf_budget(eps, x)
    step = torch.clamp(x_noisy.detach() - x_att + budget * x_noisy.grad.sign(), min=-budget, max=budget)
    x_adv = SPACE.clamp(x_att + step)
    with route(model, 'adv'):
        loss_adv = ce_sum(model(x_adv), y_att)
    (0.5 * loss_adv).backward()

    n_adv = x_att.shape[0]
    counts = {'shared': n_clean + 0.5 * n_adv + 0.5 * n_adv, 'clean': n_clean, 'adv': 0.5 * n_adv + 0.5 * n_adv}
    groups = _group_of_each_parameter(model)
    divided = {name: p.grad / counts[groups[name]] for name, p in model.named_parameters()}
    return divided, loss_adv.detach() / n_adv


def _fast_advprop_step(rescale: bool, delta: torch.Tensor, x, y):
    model = _model()
    reference = copy.deepcopy(model)
    task = _fast_task(model, rescale=rescale, delta=delta)
    task.train()
    result = task(x, y)
    result['loss'].backward()
    task.finalize_gradients()
    ours = {name: p.grad.clone() for name, p in model.named_parameters()}
    return task, ours, result, reference


def test_fast_advprop_matches_its_released_code():
    """Gradient reuse, per-image re-balancing and synchronized update speed, checked against the released rule."""
    x, y = _batch(10)
    n_clean = 8
    delta = 0.5 * SPACE.linf_budget(4.0, x) * torch.sign(torch.randn(2, 3, 32, 32, generator=torch.Generator()
                                                                          .manual_seed(1)))
    _, ours, result, reference = _fast_advprop_step(True, delta, x, y)
    divided, loss_adv = _released_code_gradients(reference, x, y, n_clean, delta, eps=4.0)
    for name, grad in divided.items():
        torch.testing.assert_close(ours[name], grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(result['loss_adv'], loss_adv, rtol=1e-4, atol=1e-5)


def test_fast_advprop_without_rescaling_keeps_the_unsynchronized_ratio():
    """Without rescaling, clean-BN and adversarial-BN gradients are 1 - p_adv and p_adv of their synchronized
    values (the paper's 1 : (1 - p_adv) : p_adv), while shared parameters get the same importance-weighted mean."""
    x, y = _batch(10)
    delta = torch.zeros(2, 3, 32, 32)
    task, plain, _, reference = _fast_advprop_step(False, delta, x, y)
    _, synced, _, _ = _fast_advprop_step(True, delta, x, y)
    assert task.scales_for(8, 2) == pytest.approx({'shared': 1.0, 'clean': 1.25, 'adv': 5.0})
    groups = _group_of_each_parameter(reference)
    assert set(groups.values()) == {'shared', 'clean', 'adv'}
    expected_ratio = {'shared': 1.0, 'clean': 0.8, 'adv': 0.2}
    for (name, p_plain), p_synced in zip(plain.items(), synced.values()):
        torch.testing.assert_close(p_plain, p_synced * expected_ratio[groups[name]], rtol=1e-5, atol=1e-7)


def test_fast_advprop_rejects_a_zero_noise_weight_and_batches_without_clean_rows():
    """The attack steps along the gradient of the weighted noisy loss: weight 0 would leave it a random start."""
    with pytest.raises(ValueError, match='noise_weight must be > 0'):
        FastAdvPropTask(_model(), space=SPACE, noise_weight=0.0, adv_weight=0.5)
    task = FastAdvPropTask(_model(), space=SPACE, eps=1.0)
    task.train()
    with pytest.raises(ValueError, match='no clean row'):
        task(*_batch(1))


def _shuffle_worker(rank: int, world_size: int, port: int, out_dir: str):
    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world_size)
    rows = torch.arange(rank * 6, rank * 6 + 6, dtype=torch.float32).view(6, 1).repeat(1, 3)
    labels = torch.arange(rank * 6, rank * 6 + 6)
    x, y = shuffle_across_ranks((rows, labels), seed=123)
    torch.save({'x': x, 'y': y}, os.path.join(out_dir, f'rank{rank}.pt'))
    dist.destroy_process_group()


def test_shuffle_bn_permutation_is_shared_and_lossless(tmp_path):
    mp.spawn(_shuffle_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f'rank{r}.pt') for r in range(2)]
    rows = torch.cat([p['x'][:, 0] for p in parts]).long()
    labels = torch.cat([p['y'] for p in parts])
    assert sorted(rows.tolist()) == list(range(12)), 'a row was lost or duplicated'
    assert torch.equal(rows, labels), 'rows and their targets were separated'
    assert rows.tolist() != list(range(12)), 'nothing was shuffled'
    expected = torch.randperm(12, generator=torch.Generator().manual_seed(123))
    assert torch.equal(rows, expected), 'ranks did not use the one shared permutation'


_DDP_METHODS = ('fast_advprop', 'madry')  # both in one process group: starting one costs more than a method's steps


def _ddp_steps(rank: int, method: str) -> dict:
    """Two DDP steps of `method` on this rank's own batch: the DDP gradients and the local ones of a plain copy that
    saw the same batch and draws (the average of the local ones over ranks is what DDP must produce)."""
    tasks = []
    for wrap in (True, False):
        model = _model()
        task = (create_task(method, model, space=SPACE, eps=4.0, shuffle_bn=False, seed=0) if method == 'fast_advprop'
                else create_task(method, model, attack=_attack()))
        task.train()
        if wrap:
            task.prepare_distributed()
        tasks.append((task, model))
    grads = {}
    for step in range(2):
        x, y = _batch(10, seed=10 * step + rank)
        for (task, model), name in zip(tasks, ('ddp', 'local')):
            model.zero_grad(set_to_none=True)
            task(x, y)['loss'].backward()
            grads[f'{name}{step}'] = [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                                      for p in model.parameters()]
    return grads


def _ddp_worker(rank: int, world_size: int, port: int, out_dir: str):
    """`_ddp_steps` of every method of `_DDP_METHODS`, saved by method."""
    import torch.distributed as dist
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    grads = {}
    for method in _DDP_METHODS:
        try:
            grads[method] = _ddp_steps(rank, method)
        except Exception as error:
            error.add_note(f'in method {method}')  # the child's traceback, which spawn re-raises, says it
            raise
    torch.save(grads, os.path.join(out_dir, f'rank{rank}.pt'))
    dist.destroy_process_group()


def test_ddp_averages_the_gradients_of_single_route_passes(tmp_path):
    """Fast AdvProp's adversarial pass leaves the clean BN unused, Madry on an MBN model the adversarial BN: DDP
    must neither fail on the next step nor drop those gradients."""
    mp.spawn(_ddp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f'rank{r}.pt') for r in range(2)]
    for method in _DDP_METHODS:
        for step in range(2):
            for ddp_0, ddp_1, local_0, local_1 in zip(ranks[0][method][f'ddp{step}'], ranks[1][method][f'ddp{step}'],
                                                      ranks[0][method][f'local{step}'],
                                                      ranks[1][method][f'local{step}']):
                torch.testing.assert_close(ddp_0, ddp_1, msg=lambda m: f'{method}, step {step}: {m}')
                torch.testing.assert_close(ddp_0, (local_0 + local_1) / 2, rtol=1e-4, atol=1e-6,
                                           msg=lambda m: f'{method}, step {step}: {m}')


def test_fast_advprops_attack_is_pgd_with_its_gradients_reused():
    """The adversarial rows are what `pgd` makes from the same random start on the adversarial branch with batch
    statistics: gradient reuse changes where the input gradient comes from, not the attack."""
    model = _model()
    reference = copy.deepcopy(model)
    task = FastAdvPropTask(model, space=SPACE, eps=8.0, step=2.0, steps=3, p_adv=0.5)
    starts, inputs = [], []
    random_start = task._random_start
    task._random_start = lambda x, generator: (starts.append(generator.get_state()), random_start(x, generator))[1]
    model.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().clone()))
    task.train()
    x, y = _batch(8)
    task(x, y)
    generator = torch.Generator()
    generator.set_state(starts[0])
    with attack_context(reference, 'batch'), route(reference, 'adv'):
        expected = pgd(reference, x[4:], y[4:], space=SPACE, eps=8.0, step=2.0, steps=3, generator=generator)
    torch.testing.assert_close(inputs[-1], expected)
