"""How PGD's clean starts are drawn: per sample, once per batch (Xie & Yuille's code), or Fast AdvProp's released rule
(the whole batch when a standard normal draw is at most 0.2), and how training builds its attack with each."""
import math

import pytest
import timm
import torch
import torch.nn as nn

import timm_advnorm  # noqa: F401  (registers the models and methods)
from timm_advnorm.attacks import PGD, InputSpace, random_l2_start
from timm_advnorm.attacks.pgd import RANDN_CLEAN_START_THRESHOLD, PGDGeometry, clean_start_rows
from timm_advnorm.task import FastAdvPropTask
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.train.build import create_run_task

SPACE = InputSpace()
DRAWS = 2000


def _x(batch: int = 6) -> torch.Tensor:
    return SPACE.from_pixels(torch.rand(batch, 3, 8, 8, generator=torch.Generator().manual_seed(1)))


def _clean_rows(start: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (start == x).flatten(1).all(dim=1)


def _share_clean(mode: str, prob: float) -> float:
    """Share of `DRAWS` batches that start clean, checking that each batch starts all clean or all random."""
    generator, like = torch.Generator().manual_seed(0), torch.empty(5)
    clean = 0
    for _ in range(DRAWS):
        rows = clean_start_rows(like, prob, mode, generator)
        assert rows.all() or not rows.any()
        clean += int(rows.all())
    return clean / DRAWS


def _within(share: float, p: float) -> bool:
    """Whether `share` of `DRAWS` Bernoulli(p) draws is within 5 standard deviations of `p`."""
    return abs(share - p) <= 5 * math.sqrt(p * (1 - p) / DRAWS)


@pytest.mark.parametrize('p', [0.2, 0.7])
def test_per_batch_starts_whole_batches_clean_at_the_given_rate(p):
    assert _within(_share_clean('per_batch', p), p)


def test_fast_advprops_rule_is_a_standard_normal_draw_against_0_2():
    """Draw for draw the released code's ``torch.randn(1) <= 0.2``; per batch with probability Φ(0.2) ≈ 0.579."""
    generator, reference = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(50):
        rows = clean_start_rows(torch.empty(4), 0.0, 'per_batch_randn', generator)
        assert rows.tolist() == [bool(torch.randn(1, generator=reference) <= RANDN_CLEAN_START_THRESHOLD)] * 4
    phi = 0.5 * (1 + math.erf(0.2 / math.sqrt(2)))
    assert phi == pytest.approx(0.5793, abs=1e-4) and _within(_share_clean('per_batch_randn', 0.0), phi)


@pytest.mark.parametrize('norm', ['linf', 'l2'])
def test_per_sample_draws_what_it_always_drew(norm):
    """The random stream of per-sample clean starts is unchanged: the box (or ball) draw, then one uniform per
    sample, clean below the probability."""
    x = _x(32)
    geometry = PGDGeometry.build(SPACE, 16.0, 1.0, norm, x)
    start = geometry.random_start(x, 0.4, torch.Generator().manual_seed(5), 'per_sample')
    generator = torch.Generator().manual_seed(5)
    if norm == 'linf':
        expected = (2.0 * torch.rand(x.shape, generator=generator) - 1.0) * geometry.radius
    else:
        expected = random_l2_start(x, geometry.radius, geometry.std, generator)
    clean = torch.rand((x.shape[0],), generator=generator) < 0.4
    expected[clean] = 0.0
    torch.testing.assert_close(start, expected, rtol=0, atol=0)
    assert clean.any() and not clean.all()
    assert ((start == 0).flatten(1).all(dim=1) == clean).all()


def test_pgd_carries_the_mode_and_refuses_unknown_ones():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5))
    x, y = _x(), torch.arange(6) % 5
    # one step of size 0 leaves every row at its start
    attack = PGD(SPACE, steps=1, step=0, step_rule='fixed', clean_start_prob=0.5, clean_start_mode='per_batch',
                 best_iterate=False, seed=0, fold_bn=False)
    kinds = set()
    for _ in range(20):
        clean = _clean_rows(attack(model, x, y), x)
        assert clean.all() or not clean.any()
        kinds.add(bool(clean.all()))
    assert kinds == {True, False} and 'clean_start_mode=per_batch' in repr(attack)
    with pytest.raises(ValueError, match='clean_start_mode'):
        PGD(SPACE, clean_start_mode='per_image')


def _built(method: str, mode: str, *argv: str):
    """The task the training command builds for `method` with ``--attack-clean-start-mode mode`` (set on the parsed
    options, as the command's option does)."""
    args, _ = parse_args(['--method', method, '--attack-steps', '1', *argv])
    args.attack_clean_start_mode = mode
    args.rank, args.distributed = 0, False
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=10)
    return create_run_task(train_options(args), model, SPACE, num_classes=10, verbose=False)


def test_training_attacks_are_built_with_the_mode():
    madry = _built('madry', 'per_batch', '--attack-clean-start-prob', '0.2')
    assert (madry.attack.clean_start_mode, madry.attack.clean_start_prob) == ('per_batch', 0.2)
    assert _built('mbn', 'per_sample').attack.clean_start_mode == 'per_sample'
    fgsm = _built('madry', 'per_batch', '--attack', 'fgsm', '--attack-clean-start-prob', '0.2')
    assert type(fgsm.attack).__name__ == 'FGSM' and fgsm.attack.clean_start_mode == 'per_batch'


def test_fast_advprop_starts_at_random_or_as_its_released_code():
    assert _built('fast_advprop', 'per_sample').clean_start_mode == 'per_sample'  # Algorithm 1
    released = _built('fast_advprop', 'per_batch_randn')
    assert released.clean_start_mode == 'per_batch_randn'
    with pytest.raises(ValueError, match='no clean-start probability'):
        _built('fast_advprop', 'per_batch')
    x = _x(4)
    clean = [_clean_rows(x + released._random_start(x, torch.Generator().manual_seed(seed)), x) for seed in range(400)]
    assert all(rows.all() or not rows.any() for rows in clean)
    assert abs(sum(bool(rows.all()) for rows in clean) / len(clean) - 0.5793) < 5 * math.sqrt(0.25 / len(clean))
    algorithm_1 = FastAdvPropTask(timm.create_model('test_mbn_resnet', num_classes=10), space=SPACE)
    assert not _clean_rows(x + algorithm_1._random_start(x, torch.Generator().manual_seed(0)), x).any()
