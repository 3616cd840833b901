"""Last-iterate accuracy (the papers' convention) beside the best iterate, from the same evaluation PGD run."""
import json
import logging
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from torch.utils.data import DataLoader, TensorDataset

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import PGD, InputSpace
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import AttackStage, EvalContext
from timm_advnorm.eval.plan.variants import model_variants
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol, get_protocol
from timm_advnorm.eval.results.files import csv_rows
from timm_advnorm.eval.results.report import log_results
from timm_advnorm.eval.results.summary import summarize_variant
from timm_advnorm.eval.run.data import IndexedSubset, seeded_subset
from timm_advnorm.eval.run.evaluator import RobustEvaluator
from timm_advnorm.eval.run.records import ResultTable
from timm_advnorm.eval.schema import ITERATE_CONVENTIONS, EvalResults, read_results
from timm_advnorm.hub import CardFacts, parse_eval_results, render_model_card
from timm_advnorm.hub.card import LAST_ITERATE_NAME
from timm_advnorm.hub.publish import DEFAULT_CARD_TEMPLATE

NUM_SAMPLES, NUM_CLASSES, SIZE = 16, 10, 32
SPACE = InputSpace()

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def model(untrained_resnet_and_images):
    return untrained_resnet_and_images[0]


@pytest.fixture(scope='module')
def data(untrained_resnet_and_images):
    return untrained_resnet_and_images[1]


def _pgd_spec(label: str, steps: int, targeted: bool, eps: float = 8.0) -> AttackSpec:
    """Evaluation PGD scoring its last iterate; a fixed step, so that its budgets share one run."""
    return AttackSpec(label, attack_config('pgd', steps=steps, step=eps / 4, step_rule='fixed', targeted=targeted,
                                           random_start=True), eps, success_rate=targeted, last_iterate=True)


def _separate_last_iterate_run(spec: AttackSpec, seed_name: str, attack_all: bool) -> AttackStage:
    """`spec` as a last-iterate attack of its own, drawing the random start of the stage `seed_name`."""
    last_only = replace(spec, label=f'separate/{spec.label}', last_iterate=False,
                        config=spec.config.stating(best_iterate=False))
    return AttackStage(last_only, attack_all=attack_all, seed_name=seed_name)


@pytest.fixture(scope='module')
def evaluated(model, data):
    """A protocol with a targeted PGD at 2 and 5 iterations (one run) and an untargeted PGD, all scoring their last
    iterate, evaluated beside separate last-iterate runs from the same starts."""
    protocol = Protocol('test', 'test', 'test', (
        _pgd_spec('pgd-t-2', 2, True), _pgd_spec('pgd-t-5', 5, True), _pgd_spec('pgd', 3, False, eps=1.0)),
        worst_case=True, headline='worst-case')
    plan = build_plan(protocol, sanity_samples=0)
    separate = [_separate_last_iterate_run(spec, seed_name, spec.targeted)
                for spec, seed_name in zip(protocol.attacks, ('pgd-t-5', 'pgd-t-5', 'pgd'))]
    plan = replace(plan, stages=plan.stages + tuple(separate))
    indices = seeded_subset(NUM_SAMPLES, NUM_SAMPLES, seed=0)
    loader = DataLoader(IndexedSubset(TensorDataset(*data), indices, range(NUM_SAMPLES)), batch_size=8)
    evaluator = RobustEvaluator(model, model_variants(model), plan.stages, EvalContext(SPACE, (3, SIZE, SIZE)),
                                NUM_CLASSES, NUM_SAMPLES, seed=0, device=torch.device('cpu'))
    return plan, ResultTable(evaluator.run(loader))


def test_the_papers_protocols_score_the_last_pgd_iterate():
    assert all(spec.last_iterate for spec in get_protocol('xie2020').attacks)
    assert [spec.label for spec in get_protocol('nofrost').attacks if spec.last_iterate] == ['pgd']
    assert not any(spec.last_iterate for spec in get_protocol('robustbench').attacks)
    assert all(spec.last_iterate for spec in get_protocol('galloway-mnist').attacks if spec.threat != 'noise')
    with pytest.raises(ValueError, match='^square: only fgsm, pgd can score its last iterate, not square.$'):
        AttackSpec('square', attack_config('square', n_queries=10), 4.0, last_iterate=True)


@pytest.mark.parametrize('label', ['pgd-t-5', 'pgd-t-2', 'pgd'])
def test_last_iterate_equals_a_separate_last_iterate_run_from_the_same_start(evaluated, label):
    _, table = evaluated
    scored, separate = table.get('model', label), table.get('model', f'separate/{label}')
    np.testing.assert_array_equal(scored['correct_last'], separate['correct'])
    np.testing.assert_array_equal(scored['success_last'], separate['success'])
    # a sample the last iterate misclassifies, the best iterate misclassifies too
    assert not np.any(scored['correct'] & ~scored['correct_last'])


def test_the_best_iterate_run_stops_attacking_fooled_samples_but_the_last_iterate_needs_them(model, data):
    """The cost of the last iterate: a best-iterate run alone drops the rows it fooled, the shared run computes
    every sample's iterations, as a last-iterate run does, and one forward more to score the last."""
    x, y = data
    rows = []
    options = dict(eps=8.0, step=2.0, steps=5, step_rule='fixed', seed=0, fold_bn=False)
    counter = model.register_forward_hook(lambda module, inputs, output: rows.append(inputs[0].shape[0]))
    try:
        PGD(SPACE, **options)(model, x, y)
        pruned = sum(rows)
        rows.clear()
        PGD(SPACE, **options).best_and_last(model, x, y, (5,))
    finally:
        counter.remove()
    assert pruned < sum(rows) == 6 * len(x)  # 5 gradient forwards and one scoring forward of every sample


def test_summary_results_and_console_name_both_numbers(model, evaluated, caplog):
    plan, table = evaluated
    variant = summarize_variant(table, model_variants(model)[0], plan, (3, SIZE, SIZE))
    attacks = {a.label: a for a in variant.attacks}
    for label, attack in attacks.items():
        columns = table.get('model', label)
        assert attack.accuracy_last_iterate == pytest.approx(100 * np.mean(columns['correct_last']))
        assert attack.accuracy <= attack.accuracy_last_iterate
    # the conventions differ on this model: the test tells them apart
    assert any(attack.accuracy < attack.accuracy_last_iterate for attack in attacks.values())
    assert attacks['pgd-t-5'].success_rate_last_iterate is not None and attacks['pgd'].success_rate_last_iterate is None
    worst_last = np.mean(np.logical_and.reduce(
        [table.get('model', 'clean')['correct']] + [table.get('model', label)['correct_last'] for label in attacks]))
    assert variant.robust_last_iterate == pytest.approx(100 * worst_last) and variant.robust <= worst_last * 100

    results = EvalResults.from_dict(dict(
        model='test_resnet', protocol=dict(name='test'), variants=[variant.to_dict()], robust_top1=variant.robust,
        robust_top1_last_iterate=variant.robust_last_iterate, conventions=ITERATE_CONVENTIONS))
    written = results.to_dict()
    assert written['robust_top1_last_iterate'] == variant.robust_last_iterate
    assert "papers' convention" in written['conventions']['robust_top1_last_iterate']
    assert 'best iterate' in written['conventions']['robust_top1']
    assert EvalResults.from_dict(json.loads(json.dumps(written))) == results
    row = next(r for r in csv_rows(results) if r['attack'] == 'pgd-t-5')
    assert row['accuracy_last_iterate'] == attacks['pgd-t-5'].accuracy_last_iterate
    with caplog.at_level(logging.INFO):
        log_results(results)
    assert f"pgd-t-5 {attacks['pgd-t-5'].accuracy:.2f} (success" in caplog.text
    assert f"last iterate, the papers' convention: {attacks['pgd-t-5'].accuracy_last_iterate:.2f}" in caplog.text


def test_protocols_without_a_last_iterate_write_none(model, evaluated):
    """A protocol that does not ask for the last iterate reports none, whatever its stages' columns hold."""
    plan, table = evaluated
    specs = tuple(replace(spec, last_iterate=False) for spec in plan.protocol.attacks)
    protocol = replace(plan.protocol, attacks=specs)
    variant = summarize_variant(table, model_variants(model)[0], build_plan(protocol, sanity_samples=0),
                                (3, SIZE, SIZE))
    assert variant.robust_last_iterate is None and 'robust_last_iterate' not in variant.to_dict()
    assert all('accuracy_last_iterate' not in a.to_dict() for a in variant.attacks)


def test_a_xie2020_run_writes_both_numbers_and_its_card_names_them(digits_dir, tmp_path):
    argv = ['--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', str(digits_dir), '--num-samples', '8',
            '-b', '8', '-j', '0', '--sanity-samples', '0', '--protocol', 'xie2020', '--reduced', '--max-steps', '2',
            '--no-progress', '--results-file', str(tmp_path / 'results.json')]
    validate_adv.validate(validate_adv.eval_options(validate_adv.parse_args(argv)))
    results = read_results(tmp_path / 'results.json')
    assert results.robust_top1 <= results.robust_top1_last_iterate
    assert set(results.conventions) == {'robust_top1', 'robust_top1_last_iterate'}
    header = (tmp_path / 'results.csv').read_text().splitlines()[0].split(',')
    assert {'accuracy', 'accuracy_last_iterate', 'success_rate_last_iterate'} <= set(header)

    data = json.loads((tmp_path / 'results.json').read_text())
    facts = CardFacts(title='m', load_name='hf-hub:org/m', architecture='test_mbn_resnet',
                      source_architecture='test_mbn_resnet', needs_plugin=True, mixture_bn=True, num_classes=10,
                      data_config={}, inference_branch='adv', results=parse_eval_results(data))
    card = render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), facts)
    adv = next(v for v in results.variants if v.name == 'adv')
    headline = adv.attacks[-1]
    assert f'{headline.accuracy:.2f} (success {headline.success_rate:.2f}); {LAST_ITERATE_NAME}: ' \
           f'{headline.accuracy_last_iterate:.2f}' in card
    assert 'the first number is on the best iterate' in card
    assert f'{adv.robust:.2f}% on the best iterate' in card
    metrics = yaml.safe_load(card.split('---\n', 2)[1])['model-index'][0]['results'][0]['metrics']
    assert any(m['name'].endswith(LAST_ITERATE_NAME) and m['value'] == round(headline.accuracy_last_iterate, 2)
               for m in metrics)
