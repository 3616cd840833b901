"""Sanity checks: an honest model passes, masked gradients and broken models are flagged."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import EvalContext
from timm_advnorm.eval.plan.variants import Variant
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol
from timm_advnorm.eval.results.sanity import run_sanity_checks, summarize_checks
from timm_advnorm.eval.run.data import IndexedSubset
from timm_advnorm.eval.run.evaluator import RobustEvaluator
from timm_advnorm.eval.run.records import ResultTable, make_record

NUM_SAMPLES = 48
SPACE = InputSpace()


pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def digits():
    """scikit-learn's digits as normalized 3x16x16 tensors (train, validation)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=16, mode='bilinear', align_corners=False).expand(-1, 3, -1, -1)
    x = SPACE.from_pixels(x.contiguous())
    y = torch.tensor(bunch.target)
    return (x[:1500], y[:1500]), (x[1500:], y[1500:])


@pytest.fixture(scope='module')
def trained(digits, one_thread, train_briefly):
    """A small CNN trained for a few seconds: ~90% accurate, with honest gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
    (x, y), _ = digits
    train_briefly(model, x, y, steps=300)
    return model.eval()


class QuantizedInput(nn.Module):
    """A classic masked-gradient "defense": quantizing the input makes its gradient zero almost everywhere."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(torch.round(x * 4.0) / 4.0)


class SaturatedSoftmax(nn.Module):
    """Huge logits: the softmax saturates in fp32 and the cross-entropy gradient underflows to exactly zero."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x) * 1e4


class Constant(nn.Module):
    """Predicts class 0 whatever the input (chance-level outputs)."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.arange(10, 0, -1).float())

    def forward(self, x):
        return self.bias.expand(x.shape[0], -1) + 0.0 * x.flatten(1)[:, :1]


class NoisyLogits(nn.Module):
    """A randomized "defense": noise on the logits at every forward."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x) + torch.randn(x.shape[0], 10)


def _protocol():
    specs = (AttackSpec('pgd', attack_config('pgd', steps=5), 8.0),)
    return Protocol('test', 'test', 'test', specs)


def _checks(model, digits, protocol=None):
    _, (x, y) = digits
    protocol = protocol or _protocol()
    loader = DataLoader(IndexedSubset(TensorDataset(x, y), range(NUM_SAMPLES), range(NUM_SAMPLES)), batch_size=24)
    plan = build_plan(protocol, sanity_samples=NUM_SAMPLES, sanity_steps=5, sanity_queries=400)
    evaluator = RobustEvaluator(model, [Variant('model')], plan.stages, EvalContext(SPACE, (3, 16, 16)), 10,
                                NUM_SAMPLES, seed=0, device=torch.device('cpu'))
    table = ResultTable(evaluator.run(loader))
    checks = run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))
    return {c.name: c for c in checks}, summarize_checks(checks)


def test_an_honest_trained_model_passes_every_check(trained, digits):
    checks, summary = _checks(trained, digits)
    assert summary['passed'], {name: c.message for name, c in checks.items() if c.status != 'pass'}
    assert checks['blackbox_not_stronger'].status == 'pass'  # the Square probe ran
    assert not summary['masked_gradients_suspected']


@pytest.mark.parametrize('wrapper', [QuantizedInput, SaturatedSoftmax])
def test_masked_gradients_are_flagged(trained, digits, wrapper):
    checks, summary = _checks(wrapper(trained), digits)
    assert checks['outputs_not_random'].status == 'pass'  # still a working classifier...
    assert summary['masked_gradients_suspected']  # ...whose robustness cannot be trusted
    assert checks['gradients_not_masked'].status == 'fail'
    assert checks['blackbox_not_stronger'].status == 'fail'  # random search beats the blind gradient attack


def test_quantized_input_survives_the_huge_budget_only_by_masking(trained, digits):
    checks, _ = _checks(QuantizedInput(trained), digits)
    assert checks['accuracy_falls_to_zero'].status == 'fail'


def test_chance_level_outputs_are_flagged(digits):
    checks, summary = _checks(Constant(), digits)
    assert checks['outputs_not_random'].status == 'fail' and not summary['passed']


def test_randomized_outputs_are_flagged(trained, digits):
    checks, _ = _checks(NoisyLogits(trained), digits)
    assert checks['outputs_deterministic'].status == 'fail'


def _synthetic_plan(accuracies, linf=None, n=100):
    """A plan without sanity probes, and a table where each attack has the given accuracy on `n` samples (the
    correct ones of a lower accuracy are among those of a higher one), or the given per-sample correctness."""
    specs = (AttackSpec('pgd-5', attack_config('pgd', steps=5), 8.0),
             AttackSpec('pgd-10', attack_config('pgd', steps=10), 8.0),
             AttackSpec('square', attack_config('square', n_queries=10), 8.0, threat='black-box'))
    plan = build_plan(Protocol('test', 'test', 'test', specs), sanity_samples=0)
    positions = torch.arange(n)
    records = [make_record('model', 'clean', 0, dict(position=positions, correct=torch.ones(n, dtype=torch.bool)))]
    for label, accuracy in accuracies.items():
        correct = accuracy if isinstance(accuracy, torch.Tensor) else positions < round(accuracy * n)
        size = torch.full((n,), linf if linf is not None else 8.0)
        records.append(make_record('model', label, 0, dict(
            position=positions, attacked=torch.ones(n, dtype=torch.bool), correct=correct, pred=positions,
            success=~correct, linf=size, l2=size)))
    return plan, ResultTable(records)


@pytest.mark.parametrize('accuracies, failing', [
    (dict(pgd_5=0.2, pgd_10=0.2, square=0.2), set()),
    (dict(pgd_5=0.2, pgd_10=0.6, square=0.6), {'more_iterations_do_not_help'}),
    (dict(pgd_5=0.5, pgd_10=0.5, square=0.1), {'blackbox_not_stronger'}),
])
def test_iteration_and_blackbox_checks_read_the_protocol_attacks(accuracies, failing):
    plan, table = _synthetic_plan({k.replace('_', '-'): v for k, v in accuracies.items()})
    checks = {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))}
    assert {name for name, c in checks.items() if c.status == 'fail'} == failing
    assert summarize_checks(checks.values())['masked_gradients_suspected'] == ('blackbox_not_stronger' in failing)


def test_rises_within_sampling_noise_are_not_findings():
    plan, table = _synthetic_plan(dict(zip(('pgd-5', 'pgd-10', 'square'), (0.25, 0.5, 0.5))), n=8)
    checks = {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))}
    assert checks['more_iterations_do_not_help'].status == 'pass'  # 2 of 8 samples: noise


def test_rises_are_judged_sample_by_sample():
    """The same 10 of 64 images all flipping to correct is a finding (sign test p < 0.001), though the two accuracies
    as independent estimates would differ by less than 2 standard errors; flips both ways that cancel are not."""
    plan, table = _synthetic_plan(dict(zip(('pgd-5', 'pgd-10', 'square'), (19 / 64, 29 / 64, 19 / 64))), n=64)
    checks = {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))}
    assert checks['more_iterations_do_not_help'].status == 'fail'
    assert checks['blackbox_not_stronger'].status == 'pass'

    first_half = torch.arange(64) < 32
    plan, table = _synthetic_plan(dict(zip(('pgd-5', 'pgd-10', 'square'), (first_half, ~first_half, first_half))),
                                  n=64)
    checks = {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))}
    assert checks['more_iterations_do_not_help'].status == 'pass'


def test_a_perturbation_beyond_its_budget_is_reported():
    plan, table = _synthetic_plan(dict(zip(('pgd-5', 'pgd-10', 'square'), (0.2, 0.2, 0.2))), linf=9.0)
    checks = {c.name: c for c in run_sanity_checks(table, 'model', plan, 10, (3, 16, 16))}
    assert checks['perturbation_within_budget'].status == 'fail'
    assert len(checks['perturbation_within_budget'].details['violations']) == 3
