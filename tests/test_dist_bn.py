"""``--dist-bn reduce|broadcast`` makes both branches' running statistics of mixture BN the same on every process
(two gloo processes on CPU)."""

import pytest
import timm
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.layers import route
from timm_advnorm.train.distribute_bn import check_dist_bn, distribute_bn, running_statistics
from ports import free_port

_WORLD = 2
_MODES = ('reduce', 'broadcast')


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model('test_mbn_resnet', num_classes=10)


def _train_on_own_rows(model: torch.nn.Module, rank: int) -> None:
    """One training forward per branch on rows only this rank sees, so each rank's running statistics differ."""
    generator = torch.Generator().manual_seed(100 + rank)
    model.train()
    with torch.no_grad():
        for branch in ('clean', 'adv'):
            with route(model, branch):
                model(torch.randn(4, 3, 32, 32, generator=generator) * (1 + rank + (branch == 'adv')))


def _worker(rank: int, port: int, path: str) -> None:
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=_WORLD)
    try:
        for mode in _MODES:
            model = _model()
            _train_on_own_rows(model, rank)
            distribute_bn(model, mode)
            torch.save(model.state_dict(), f'{path}/{mode}{rank}.pt')
    finally:
        dist.destroy_process_group()


def _statistics_keys(state: dict) -> list:
    return [k for k in state if k.endswith(('running_mean', 'running_var'))]


def test_both_branches_are_reduced_or_broadcast(tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=_WORLD, join=True)
    local = []  # what each rank held before distributing
    for rank in range(_WORLD):
        model = _model()
        _train_on_own_rows(model, rank)
        local.append(model.state_dict())
    keys = _statistics_keys(local[0])
    assert any('adv_bn' in k for k in keys) and any('adv_bn' not in k for k in keys)
    for mode in _MODES:
        results = [torch.load(tmp_path / f'{mode}{r}.pt') for r in range(_WORLD)]
        for key in keys:
            assert not torch.equal(local[0][key], local[1][key]), key  # the ranks did differ
            expected = (local[0][key] + local[1][key]) / 2 if mode == 'reduce' else local[0][key]
            for rank in range(_WORLD):
                torch.testing.assert_close(results[rank][key], expected, msg=f'{mode} {key} on rank {rank}')
        for key in results[0]:  # weights and counters are left alone
            if key not in keys:
                for rank in range(_WORLD):
                    assert torch.equal(results[rank][key], local[rank][key]), key


def test_running_statistics_include_the_adversarial_branch():
    model = _model()
    stats = running_statistics(model)
    named = {id(t): n for n, t in model.named_buffers()}
    names = [named[id(t)] for t in stats]
    assert len(names) == len(_statistics_keys(model.state_dict()))
    assert any('adv_bn' in n for n in names)


def test_single_process_and_off_leave_statistics_alone():
    model = _model()
    _train_on_own_rows(model, 0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for mode in ('reduce', 'broadcast', ''):
        distribute_bn(model, mode)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_unknown_mode_is_a_value_error():
    with pytest.raises(ValueError, match='--dist-bn'):
        check_dist_bn('average')
