"""What every attack core starts from and records with: its inputs, the clean record, the targeted runs, the scoring
of an iterate."""
import pytest
import torch
import torch.nn as nn

from timm_advnorm.attacks import InputSpace, attack_context, bim, cw_linf, input_gradient
from timm_advnorm.attacks.base import attack_inputs, evaluate_iterate
from timm_advnorm.attacks.best_iterate import BestIterate
from timm_advnorm.attacks.core import cross_entropy_per_sample, fooling_tier, is_clearly_fooled
from timm_advnorm.attacks.eval_attack import clean_record, target_restarts

SPACE = InputSpace()
NUM_CLASSES = 5


@pytest.fixture(scope='module')
def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, NUM_CLASSES)).eval()


def _batch(n: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return SPACE.from_pixels(torch.rand(n, 3, 8, 8, generator=g)), torch.randint(0, NUM_CLASSES, (n,), generator=g)


@pytest.mark.parametrize('dtype, work_dtype', [
    (torch.float32, torch.float32), (torch.bfloat16, torch.float32), (torch.float64, torch.float64)])
def test_attack_inputs_detach_raise_to_fp32_and_keep_the_callers_dtype(dtype, work_dtype):
    x, y = _batch()
    x = x.to(dtype).requires_grad_(True)
    soft = torch.nn.functional.one_hot(y, NUM_CLASSES).float() * 0.8 + 0.04
    inputs = attack_inputs(x, soft)
    assert inputs.x.dtype == work_dtype and not inputs.x.requires_grad
    assert torch.equal(inputs.x, x.detach().to(work_dtype))
    assert torch.equal(inputs.labels, y), 'soft targets give their argmax'
    assert inputs.dtype == dtype
    assert torch.equal(attack_inputs(x, y).labels, y)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_linf_budget_comes_in_the_dtype_of_the_inputs(dtype):
    x = _batch()[0].to(dtype)
    radius = SPACE.linf_budget(8, x)
    assert radius.dtype == dtype and radius.shape == (1, 3, 1, 1)
    assert torch.equal(radius, ((8 / 255) / SPACE.std_like(x)).to(dtype)), 'computed in fp32, then cast'


def test_clean_record_marks_the_clearly_misclassified_samples_fooled(model):
    x, y = _batch(16)
    with attack_context(model):
        logits, best = clean_record(model, x, y)
        targets = (y + 1) % NUM_CLASSES
        _, best_targeted = clean_record(model, x, y, targets)
    assert torch.equal(logits, model(x).detach())
    assert torch.equal(best.x, x)
    assert torch.equal(best.fooled, is_clearly_fooled(logits, y))
    assert 0 < int(best.fooled.sum()) < len(y), 'the check needs both kinds of sample'
    assert torch.equal(best_targeted.fooled, is_clearly_fooled(logits, y, targets)), 'fooled means on its target'
    assert torch.equal(best.robust_rows(), (~best.fooled).nonzero().squeeze(1))


def test_target_restarts_run_each_target_rank_on_the_samples_still_robust():
    labels = torch.tensor([0, 1, 2])
    clean_logits = torch.tensor([[5.0, 4, 3, 2, 1], [1.0, 5, 4, 3, 2], [3.0, 2, 5, 4, 1]])
    best = BestIterate(torch.zeros(3, 1))
    runs = []
    for restart, rows, labels_and_targets, hit, part in target_restarts(best, clean_logits, labels, None, 2, 2):
        runs.append((restart, rows.tolist(), labels_and_targets.tolist(), hit, part))
        if len(runs) == 1:  # the first run fools sample 1: no later run attacks it
            best.update(torch.tensor([1]), torch.ones(1, 1), torch.tensor([True]))
    assert runs == [
        (0, [0, 1, 2], [[0, 1], [1, 2], [2, 3]], None, 'target 1/2, restart 1/2'),  # runner-up classes
        (1, [0, 2], [[0, 1], [2, 3]], None, 'target 1/2, restart 2/2'),
        (0, [0, 2], [[0, 2], [2, 0]], None, 'target 2/2, restart 1/2'),  # third-ranked classes
        (1, [0, 2], [[0, 2], [2, 0]], None, 'target 2/2, restart 2/2'),
    ]


def test_target_restarts_toward_given_targets_must_hit_them():
    labels, targets = torch.tensor([0, 1]), torch.tensor([3, 4])
    runs = list(target_restarts(BestIterate(torch.zeros(2, 1)), torch.zeros(2, 5), labels, targets, 9, 1))
    assert len(runs) == 1
    assert runs[0].labels_and_targets.tolist() == [[0, 3], [1, 4]] and torch.equal(runs[0].hit_targets, targets)
    assert runs[0].part == 'given targets, restart 1/1'
    with pytest.raises(ValueError, match='Targets must differ from the labels'):
        next(target_restarts(BestIterate(torch.zeros(2, 1)), torch.zeros(2, 5), labels, labels, 9, 1))


def test_evaluate_iterate_steps_with_the_gradient_or_scores_the_last_iterate(model):
    x, y = _batch()
    with attack_context(model):
        grad, logits, loss = evaluate_iterate(model, x, y, cross_entropy_per_sample)
        reference = input_gradient(model, x, y, cross_entropy_per_sample)
        no_grad, last_logits, last_loss = evaluate_iterate(model, x, y, cross_entropy_per_sample, gradient=False)
    assert all(torch.equal(a, b) for a, b in zip((grad, logits, loss), reference))
    assert no_grad is None
    assert torch.equal(last_logits, logits) and torch.equal(last_loss, loss)


def test_update_from_logits_judges_and_ranks_iterates_as_the_attack_saw_them():
    logits = torch.tensor([[0.0, 9.0, 0.0], [9.0, 0.0, 0.0], [0.0, 0.0, 9.0]])
    labels, targets = torch.tensor([0, 0, 0]), torch.tensor([1, 2, 1])
    rows, x_adv, objective = torch.arange(3), torch.ones(3, 1), torch.tensor([1.0, 2.0, 3.0])
    best, reference = BestIterate(torch.zeros(3, 1)), BestIterate(torch.zeros(3, 1))
    fooled = best.update_from_logits(rows, x_adv, logits, labels, objective, targets)
    expected = is_clearly_fooled(logits, labels, targets)
    reference.update(rows, x_adv, expected, objective, fooling_tier(logits, labels, targets))
    assert fooled.tolist() == [True, False, False] and torch.equal(fooled, expected)
    assert torch.equal(best.x, reference.x) and torch.equal(best.tier, reference.tier)
    assert torch.equal(best.objective, reference.objective) and torch.equal(best.fooled, reference.fooled)


@pytest.mark.parametrize('attack', [bim, cw_linf])
def test_pgd_based_evaluation_cores_take_bf16_inputs_like_every_core(model, attack):
    x, y = _batch()
    with attack_context(model):
        x_adv = attack(model, x.bfloat16(), y, space=SPACE, eps=8, steps=3)
        reference = attack(model, x.bfloat16().float(), y, space=SPACE, eps=8, steps=3)
    assert x_adv.dtype == torch.bfloat16 and x_adv.shape == x.shape
    assert torch.equal(x_adv, reference.bfloat16()), 'attacked in fp32, returned in the caller dtype'
