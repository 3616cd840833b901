"""Fooling decisions of evaluation attacks survive re-scoring: a sample counts as fooled, and stops being attacked,
only past a margin larger than the rounding differences between the attack's forward and the final scoring; the
candidates kept until then rank by how nearly they fool."""
import pytest
import torch
import torch.nn as nn

from timm_advnorm.attacks import InputSpace, attack_context, create_attack, pgd
from timm_advnorm.attacks.best_iterate import BestIterate
from timm_advnorm.attacks.core import fooling_margin, fooling_tier, is_clearly_fooled, is_fooled, rounding_tolerance

SPACE = InputSpace()
NUM_CLASSES = 4

# Every evaluation attack that records fooled samples and stops attacking them, at small budgets.
CONFIGS = {
    'pgd': dict(eps=8, step=2, steps=5, random_start=False),
    'apgd-ce': dict(eps=8, steps=5),
    'apgd-dlr': dict(eps=8, steps=5),
    'mifgsm': dict(eps=8, steps=5),
    'bim-linf': dict(eps=8, steps=5),
    'cw-linf': dict(eps=8, steps=5),
    'square': dict(eps=8, n_queries=40),
    'autoattack': dict(eps=8, steps=5, n_target_classes=2, n_queries=20),
}


def _barely_misclassified():
    """A linear classifier and an input of true class 0 that class 1 out-scores by 1e-6 of the logit scale: fooled,
    but by less than any forward's rounding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, NUM_CLASSES)).eval()
    x = SPACE.from_pixels(torch.rand(1, 3, 8, 8))
    with torch.no_grad():
        model[1].bias.zero_()
        logits = model(x)[0]
        scale = float(logits.abs().max())
        # class 1 leads class 0 by a hair; classes 2 and 3 fall well behind both
        model[1].bias.copy_(torch.tensor([scale, scale * (1 + 1e-6), -scale, -scale]) - logits)
        margin = fooling_margin(model(x), torch.zeros(1, dtype=torch.long))
    assert 0 < margin < 1e-5 * scale, 'the construction gives a barely misclassified input'
    return model, x, torch.zeros(1, dtype=torch.long)


def test_rounding_tolerance_follows_precision_and_logit_scale():
    logits = torch.tensor([[1.0, -2.0, 0.5], [10.0, 3.0, -40.0]])
    fp32 = rounding_tolerance(logits)
    bf16 = rounding_tolerance(logits, torch.bfloat16)
    torch.testing.assert_close(fp32, torch.tensor([2e-4, 40e-4]))
    torch.testing.assert_close(bf16, 8 * 2 ** -7 * torch.tensor([2.0, 40.0]))


def test_fooling_margin_and_clear_fooling():
    logits = torch.tensor([[1.0, 1.0 + 1e-6, 0.0], [0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    labels = torch.tensor([0, 0, 0])
    torch.testing.assert_close(fooling_margin(logits, labels), torch.tensor([1e-6, 2.0, -2.0]))
    assert is_fooled(logits, labels).tolist() == [True, True, False]
    assert is_clearly_fooled(logits, labels).tolist() == [False, True, False]
    targets = torch.tensor([2, 1, 2])
    torch.testing.assert_close(fooling_margin(logits, labels, targets), torch.tensor([-1.0 - 1e-6, 1.0, -2.0]))


@pytest.mark.parametrize('name', list(CONFIGS))
def test_barely_fooled_samples_are_attacked_past_the_tolerance(name):
    """A sample fooled by a rounding-sized margin is attacked on, so a differently rounded forward agrees."""
    model, x, y = _barely_misclassified()
    attack = create_attack(name, space=SPACE, seed=0, **CONFIGS[name])
    x_adv = attack(model, x, y)
    with torch.no_grad():
        logits = model(x_adv)
    assert (fooling_margin(logits, y) > rounding_tolerance(logits)).all()


def test_bf16_pgd_pushes_past_the_bf16_tolerance():
    model, x, y = _barely_misclassified()
    with attack_context(model):
        x_adv = pgd(model, x, y, space=SPACE, eps=8, step=2, steps=5, random_start=False, best_iterate=True,
                    autocast_dtype=torch.bfloat16)
    with torch.no_grad():
        logits = model(x_adv)
    assert (fooling_margin(logits, y) > rounding_tolerance(logits, torch.bfloat16)).all()


def test_fooling_tier_ranks_target_then_any_error_then_correct():
    logits = torch.tensor([[0.0, 5.0, 1.0], [0.0, 1.0, 5.0], [5.0, 0.0, 1.0]])  # predictions 1, 2, 0
    labels = torch.tensor([0, 0, 0])
    assert fooling_tier(logits, labels, torch.tensor([1, 1, 1])).tolist() == [3, 1, 0]
    assert fooling_tier(logits, labels).tolist() == [3, 3, 0]


def test_best_iterate_ranks_tiers_before_the_objective():
    best, rows, none = BestIterate(torch.zeros(3, 1)), torch.arange(3), torch.zeros(3, dtype=torch.bool)

    def offer(value: float, objective, tier):
        best.update(rows, torch.full((3, 1), value), none, torch.tensor(objective), torch.tensor(tier))

    offer(1.0, [5.0, 5.0, 5.0], [0, 0, 0])
    offer(2.0, [1.0, 1.0, 1.0], [1, 3, 0])  # a higher tier wins at a lower objective; row 2 stays at 1.0
    offer(3.0, [2.0, 9.0, 9.0], [1, 1, 0])  # same tier, higher objective wins; a lower tier never does
    assert best.x.squeeze(1).tolist() == [3.0, 2.0, 3.0]
    assert best.tier.tolist() == [1, 3, 0]
