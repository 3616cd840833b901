"""The loss a protocol can record beside its accuracies (Galloway et al.'s loss columns): every image attacked, the
mean cross-entropy clean and at each attack's results, and the accuracies unchanged."""
import json
import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import PGD, InputSpace, attack_context
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import EvalContext
from timm_advnorm.eval.plan.variants import model_variants
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol, get_protocol
from timm_advnorm.eval.results.files import csv_rows
from timm_advnorm.eval.results.report import log_results
from timm_advnorm.eval.results.summary import summarize_variant
from timm_advnorm.eval.run.data import IndexedSubset, seeded_subset
from timm_advnorm.eval.run.evaluator import RobustEvaluator
from timm_advnorm.eval.run.records import ResultTable
from timm_advnorm.eval.schema import EvalResults

NUM_SAMPLES, NUM_CLASSES, SIZE = 16, 10, 32
SPACE = InputSpace()
# deterministic attacks (no random start): with and without the loss they must score the same images alike
ATTACKS = (
    AttackSpec('bim-4', attack_config('bim-linf', steps=4, step=2.0), 8.0),
    AttackSpec('bim-2', attack_config('bim-linf', steps=2, step=2.0), 8.0),
    AttackSpec('fgsm', attack_config('fgsm', step=8.0, random_start=False), 8.0),
    AttackSpec('noise', attack_config('gaussian-noise', std=0.5), 0.0, threat='noise'),
    AttackSpec('bim-last', attack_config('pgd', steps=3, step=2.0, step_rule='fixed', random_start=False), 8.0,
               last_iterate=True),
)

pytestmark = pytest.mark.usefixtures('one_thread')


def _evaluate(model, data, loss: bool):
    protocol = Protocol('test', 'test', 'test', ATTACKS, headline='bim-4', loss=loss)
    plan = build_plan(protocol, sanity_samples=0)
    indices = seeded_subset(NUM_SAMPLES, NUM_SAMPLES, seed=0)
    loader = DataLoader(IndexedSubset(TensorDataset(*data), indices, range(NUM_SAMPLES)), batch_size=8)
    evaluator = RobustEvaluator(model, model_variants(model), plan.stages, EvalContext(SPACE, (3, SIZE, SIZE)),
                                NUM_CLASSES, NUM_SAMPLES, seed=0, device=torch.device('cpu'))
    table = ResultTable(evaluator.run(loader))
    return table, summarize_variant(table, model_variants(model)[0], plan, (3, SIZE, SIZE))


@pytest.fixture(scope='module')
def with_loss(untrained_resnet_and_images):
    return _evaluate(*untrained_resnet_and_images, loss=True)


@pytest.fixture(scope='module')
def without_loss(untrained_resnet_and_images):
    return _evaluate(*untrained_resnet_and_images, loss=False)


def test_clean_loss_is_the_per_image_cross_entropy(untrained_resnet_and_images, with_loss):
    table, variant = with_loss
    model, (x, y) = untrained_resnet_and_images
    clean = table.get('model', 'clean')
    with torch.no_grad():
        expected = F.cross_entropy(model(x), y, reduction='none').numpy()
    images = np.asarray(seeded_subset(NUM_SAMPLES, NUM_SAMPLES, seed=0))[clean['position']]  # position -> image
    np.testing.assert_allclose(clean['loss'], expected[images], rtol=1e-5, atol=1e-6)
    assert variant.clean_loss == pytest.approx(float(expected.mean()), abs=1e-5)


def test_every_image_is_attacked_and_the_accuracies_are_those_without_the_loss(with_loss, without_loss):
    table, variant = with_loss
    plain_table, plain_variant = without_loss
    clean_correct = table.get('model', 'clean')['correct'].astype(bool)
    assert 0 < clean_correct.sum() < NUM_SAMPLES  # some images are misclassified clean: the loss attacks them too
    for attack, plain in zip(variant.attacks, plain_variant.attacks):
        columns = table.get('model', attack.label)
        assert columns['attacked'].all() and attack.attacked == NUM_SAMPLES
        assert np.isfinite(columns['loss']).all() and attack.loss == pytest.approx(float(np.mean(columns['loss'])))
        np.testing.assert_array_equal(columns['correct'], plain_table.get('model', attack.label)['correct'])
        assert attack.accuracy == plain.accuracy and plain.loss is None
    adversarial = {a.label: a.loss for a in variant.attacks if a.threat != 'noise'}
    assert min(adversarial.values()) > variant.clean_loss  # the attacks raise the loss
    assert adversarial['bim-4'] >= adversarial['bim-2'] - 1e-6  # the shorter budget read off the same run
    assert plain_variant.clean_loss is None
    attacked = plain_table.get('model', 'bim-4')['attacked'].astype(bool)
    np.testing.assert_array_equal(attacked, clean_correct)  # without the loss only the correct ones are attacked


def test_an_attack_scoring_its_last_iterate_records_the_loss_there(untrained_resnet_and_images, with_loss):
    """The loss at the attack's final point, as the papers measure it, not at the best iterate (which stops at the
    first fooling iterate, just past the decision boundary)."""
    table, _ = with_loss
    model, (x, y) = untrained_resnet_and_images
    columns = table.get('model', 'bim-last')
    images = np.asarray(seeded_subset(NUM_SAMPLES, NUM_SAMPLES, seed=0))[columns['position']]
    last = PGD(SPACE, eps=8.0, steps=3, step=2.0, step_rule='fixed', random_start=False, best_iterate=False)
    with attack_context(model):
        x_last = last(model, x, y)
    with torch.no_grad():
        expected = F.cross_entropy(model(x_last), y, reduction='none').numpy()
    np.testing.assert_allclose(columns['loss'], expected[images], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(columns['correct_last'] & ~columns['correct'], np.zeros(NUM_SAMPLES, dtype=bool))


def test_results_csv_and_console_carry_the_loss(with_loss, without_loss, caplog):
    _, variant = with_loss
    results = EvalResults.from_dict(dict(model='test_resnet', protocol=dict(name='test'), variants=[variant.to_dict()],
                                         robust_top1=variant.robust))
    written = results.to_dict()
    assert written['variants'][0]['clean_loss'] == variant.clean_loss
    assert EvalResults.from_dict(json.loads(json.dumps(written))) == results
    rows = {row['attack']: row for row in csv_rows(results)}
    assert rows['clean']['loss'] == variant.clean_loss and rows['fgsm']['loss'] == variant.attacks[2].loss
    with caplog.at_level(logging.INFO):
        log_results(results)
    assert f'clean {variant.clean:.2f} (loss {variant.clean_loss:.4f})' in caplog.text
    assert f'loss {variant.attacks[0].loss:.4f} over all images' in caplog.text
    _, plain = without_loss
    assert 'clean_loss' not in plain.to_dict() and all('loss' not in a.to_dict() for a in plain.attacks)


def test_the_loss_needs_an_independent_protocol_and_is_recorded_only_when_asked():
    with pytest.raises(ValueError, match='independent aggregation'):
        Protocol('test', 'test', 'test', ATTACKS[:1], aggregation='cascade', loss=True)
    assert get_protocol('galloway-mnist').to_dict()['loss'] is True
    assert 'loss' not in get_protocol('galloway').to_dict()
