"""Model cards state exactly what was run: threat model, budgets, data, reduced runs, no local paths, Hub metadata."""
import argparse
import copy
import json
from pathlib import Path

import pytest
import timm
import torch
import yaml
from huggingface_hub import ModelCard

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.commands.publish import get_args_parser, publish_options
from timm_advnorm.hub import CardFacts, parse_eval_results, render_model_card
from timm_advnorm.hub.publish import DEFAULT_CARD_TEMPLATE, publish
from timm_advnorm.weights.digest import branch_digests, state_dict_digest

NUM_CLASSES = 5


def _pgd(label, steps, accuracy, protocol_label=None, success=None):
    entry = dict(label=label, attack='pgd', threat='white-box', norm='linf', eps=16.0, steps=steps, targeted=True,
                 kwargs=dict(steps=steps, step=1.0, step_rule='max', targeted=True, random_start=True),
                 accuracy=accuracy, success_rate=success)
    if protocol_label:
        entry['protocol_label'] = protocol_label
    return entry


def _variant(name, clean, attacks, robust):
    return dict(name=name, kind=name, clean=clean, attacks=attacks, worst_case=None, robust=robust,
                sanity=dict(passed=True, failed=[]))


def _results(tmp_path: Path, reduced: bool) -> dict:
    """validate_adv.py's layout for xie2020 (two of its attacks), full or reduced (budgets as the run records them)."""
    if reduced:
        attacks = [_pgd('pgd-t-2', 2, 50.0, 'pgd-t-10', 25.0), _pgd('pgd-t-13', 13, 37.5, 'pgd-t-2000', 50.0)]
    else:
        attacks = [_pgd('pgd-t-10', 10, 50.0, 'pgd-t-10', 25.0), _pgd('pgd-t-2000', 2000, 37.5, 'pgd-t-2000', 50.0)]
    clean_attacks = [dict(a, accuracy=a['accuracy'] - 25.0) for a in attacks]
    return {
        'model': 'test_mbn_resnet', 'checkpoint': str(tmp_path / 'run' / 'last.pth.tar'), 'dataset': 'digits',
        'split': 'validation', 'num_samples': 64, 'seed': 0, 'amp': None, 'sanity_passed': True,
        'data_config': dict(input_size=[3, 32, 32], interpolation='bilinear', crop_pct=1.0, crop_mode='center',
                            mean=[0.5] * 3, std=[0.5] * 3),
        'protocol': {'name': 'xie2020', 'headline': 'pgd-t-2000', 'reduced': reduced,
                     'reference': 'Xie & Yuille, ICLR 2020, Sec. 3 and Table 7', 'attacks': []},
        'primary_variant': 'adv',
        'variants': [_variant('clean', 75.0, clean_attacks, clean_attacks[-1]['accuracy']),
                     _variant('adv', 62.5, attacks, attacks[-1]['accuracy'])],
    }


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    """A training checkpoint whose recipe names folders of the training machine, and full and reduced results."""
    folder = tmp_path_factory.mktemp('machine')
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES).eval()
    args = argparse.Namespace(
        model='test_mbn_resnet', num_classes=NUM_CLASSES, mean=[0.5] * 3, std=[0.5] * 3, method='mbn', epochs=3,
        data_dir=str(folder / 'data'), output=str(folder / 'output'), initial_checkpoint=str(folder / 'init.pth'),
        resume='', experiment='run', class_map='', dataset='digits')
    torch.save(dict(epoch=2, arch='test_mbn_resnet', state_dict=model.state_dict(), args=args), folder / 'last.pth.tar')
    digests = dict(weights_digest=state_dict_digest(model.state_dict()), branch_weights_digests=branch_digests(model))
    for reduced in (False, True):
        (folder / f'results-{"reduced" if reduced else "full"}.json').write_text(
            json.dumps(dict(_results(folder, reduced), **digests)))
    return folder


def _card(run: Path, tmp_path: Path, *extra, checkpoint: str = 'last.pth.tar') -> str:
    """Publish to a local folder only (no Hub repository) and return the card, which names only the commands a
    wheel installs."""
    out = tmp_path / 'published'
    args = get_args_parser().parse_args(
        [str(run / checkpoint), '--inference-branch', 'adv', '--local-dir', str(out), *map(str, extra)])
    publish(publish_options(args), DEFAULT_CARD_TEMPLATE.read_text())
    card = (out / 'README.md').read_text(encoding='utf-8')
    assert not any(script in card for script in ('train_adv.py', 'validate_adv.py', 'demo.sh', 'hub/publish.py'))
    return card


def _body(card: str) -> str:
    return card.split('---\n', 2)[2]


def test_card_states_the_threat_model_and_data_as_run(run, tmp_path):
    card = _card(run, tmp_path, '--results', run / 'results-full.json')
    body = _body(card)
    assert '- **Protocol:** `xie2020` (Xie & Yuille, ICLR 2020, Sec. 3 and Table 7)' in body
    assert '- **Data:** `digits`, split `validation`, 64 images (subset seed 0)' in body
    assert '- **Threat model:** white-box, L∞ ε = 16/255, targeted, random target class' in body
    # the branch the model loads on comes first
    assert '| attack | threat model | budget | accuracy % [adv] | accuracy % [clean] |' in body
    assert '| pgd-t-2000 | white-box, L∞ ε = 16/255, targeted, random target class | 2000 iterations, step 1/255, ' \
           'random start | 37.50 (success 50.00) | 12.50 (success 50.00) |' in body
    assert '| pgd-t-10 | white-box, L∞ ε = 16/255, targeted, random target class | 10 iterations, step 1.6/255' in body
    assert "**Robust accuracy on `adv`:** 37.50% (the protocol's headline), the branch the model loads on" in body
    assert '- **Preprocessing:** the model\'s own (above)' in body and 'reduced' not in body


def test_reduced_results_need_a_flag_and_are_announced_first(run, tmp_path):
    with pytest.raises(ValueError, match='--allow-reduced-results'):
        _card(run, tmp_path, '--results', run / 'results-reduced.json')
    assert not (tmp_path / 'published').exists()
    card = _card(run, tmp_path, '--results', run / 'results-reduced.json', '--allow-reduced-results')
    body = _body(card)
    first_lines = body.split('- **Architecture:**')[0]
    assert first_lines.startswith('# published\n') and 'reduced' in first_lines and 'Smoke-test' in first_lines
    assert "protocol's headline" not in body
    assert "37.50% (pgd-t-13: the protocol's pgd-t-2000 reduced to 13 iterations; not the protocol's result)" in body
    assert '| pgd-t-13 (protocol: pgd-t-2000) | white-box, L∞ ε = 16/255, targeted, random target class | ' \
           '13 iterations, step 1.23077/255, random start |' in body
    names = [m.metric_name for m in ModelCard(card).data.eval_results]
    assert names and all(name.startswith('xie2020 (reduced): ') for name in names)


def test_card_holds_no_path_of_the_publishing_machine(run, tmp_path):
    card = _card(run, tmp_path, '--results', run / 'results-full.json')
    assert str(run) not in card and str(tmp_path) not in card
    assert "timm.create_model('local-dir:path/to/published', pretrained=True)" in card
    assert 'Omitted: `data_dir`, `initial_checkpoint`, `output`' in card
    assert 'experiment: run' in card and "resume: ''" in card  # names and empty options stay in the recipe


def test_model_index_parses_as_a_hub_model_card(run, tmp_path):
    """The model index holds the protocol's headline numbers only (pgd-t-2000 and clean, not pgd-t-10), the branch
    the model loads on first; every attack is in the body's table."""
    text = _card(run, tmp_path, '--results', run / 'results-full.json')
    card = ModelCard(text)
    results = card.data.eval_results
    assert card.data.model_name == 'published'
    for result in results:
        assert (result.task_type, result.dataset_type, result.dataset_name) == (
            'image-classification', 'digits', 'digits')
        assert result.dataset_split == 'validation' and result.metric_type == 'accuracy'
    headline = ('xie2020: pgd-t-2000 (white-box, L∞ ε = 16/255, targeted, random target class; 2000 iterations, '
                'step 1/255, random start)')
    assert [(r.metric_name, r.metric_value) for r in results] == [
        (f'{headline} [adv]', 37.5), ('xie2020: clean [adv]', 62.5),
        (f'{headline} [clean]', 12.5), ('xie2020: clean [clean]', 75.0)]
    assert '| pgd-t-10 |' in _body(text)
    assert 'datasets' not in card.data.to_dict()  # the digits have no Hub dataset id


def test_card_says_the_model_loads_on_its_inference_branch(run, tmp_path):
    body = _body(_card(run, tmp_path))
    assert '- **Inference branch:** `adv` (the model loads routed to it)' in body
    assert "pretrained=True).eval()  # runs on its adv branch" in body
    assert 'It loads routed to its **`adv`** branch' in body
    assert "the branch to use at inference" not in body and "set_route(model, 'clean')" in body
    assert 'saved after 3 training epochs' in body


def _facts(results: dict) -> CardFacts:
    return CardFacts(title='m', load_name='hf-hub:org/m', architecture='test_resnet', source_architecture='test_resnet',
                     needs_plugin=False, mixture_bn=False, num_classes=10, data_config=dict(mean=(0.5,) * 3),
                     results=parse_eval_results(results))


def test_card_describes_queries_targets_noise_and_a_different_preprocessing():
    attacks = [
        dict(label='apgd-t', attack='apgd-t', threat='white-box', norm='linf', eps=4.0, steps=100, targeted=False,
             kwargs=dict(steps=100, n_restarts=1, n_target_classes=9), accuracy=40.0),
        dict(label='square', attack='square', threat='black-box', norm='linf', eps=4.0, steps=5000, targeted=False,
             kwargs=dict(n_queries=5000, n_restarts=1), accuracy=45.0),
        dict(label='gaussian-noise', protocol_label='gaussian-noise', attack='gaussian-noise', threat='noise',
             noise='gaussian', sigma=0.5, steps=None, targeted=False, kwargs=dict(std=0.5), accuracy=60.0),
    ]
    results = dict(model='test_resnet', protocol=dict(name='custom', headline='worst-case', aggregation='cascade'),
                   dataset='hfds/imagenet-1k', data_config=dict(mean=[0.485, 0.456, 0.406]),
                   variants=[dict(name='model', clean=70.0, attacks=attacks, worst_case=35.0, robust=35.0)])
    card = render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), _facts(results))
    assert '| apgd-t | white-box, L∞ ε = 4/255, targeted | 100 iterations, 1 restart, 9 target classes |' in card
    assert '| square | black-box, L∞ ε = 4/255, untargeted | 5000 queries, 1 restart |' in card
    assert '| gaussian-noise | gaussian noise, σ = 0.5 |  |' in card
    assert 'the attacks ran as a cascade' in card and 'success rate' not in card
    assert '- **Threat model:** white-box, L∞ ε = 4/255, targeted; black-box, L∞ ε = 4/255, untargeted' in card
    assert '- **Preprocessing:** differs from the model\'s: mean [0.485, 0.456, 0.406] (model: [0.5, 0.5, 0.5])' in card
    meta = yaml.safe_load(card.split('---\n', 2)[1])
    assert meta['model-index'][0]['results'][0]['dataset'] == dict(type='ILSVRC/imagenet-1k', name='hfds/imagenet-1k')
    # a model without branches: its headline (the worst case) and clean accuracy, unlabelled
    assert [m['name'] for m in meta['model-index'][0]['results'][0]['metrics']] == [
        'custom: worst case (per sample, the worst of the attacks above)', 'custom: clean']


def test_results_without_threat_model_fields_still_render():
    """Older and flat results lack the threat-model keys: the card shows what they have, nothing invented."""
    results = dict(model='m', protocol='p', results=[dict(name='clean', accuracy=0.7),
                                                     dict(name='pgd', acc=0.5, eps=8, steps=10)])
    parsed = parse_eval_results(results)
    assert not parsed.reduced and parsed.split is None and parsed.sanity_passed is None
    card = render_model_card(DEFAULT_CARD_TEMPLATE.read_text(), _facts(results))
    assert '| pgd | ε = 8/255 | 10 iterations | 50.00 |' in card
    assert '**Robust accuracy:** 50.00% (strongest attack: pgd)' in card


def test_results_read_the_run_budget_and_the_protocol_label():
    data = _results(Path('/x'), reduced=True)
    parsed = parse_eval_results(data)
    assert parsed.reduced and parsed.split == 'validation' and parsed.seed == 0 and parsed.precision == 'float32'
    last = parsed.strongest('adv')
    assert (last.name, last.protocol_label, last.steps, last.eps, last.norm, last.targeted) == (
        'pgd-t-13', 'pgd-t-2000', 13, 16.0, 'linf', True)
    broken = copy.deepcopy(data)
    broken['variants'][1]['attacks'][0].update(eps='16', steps=True, norm=None, kwargs=[])
    entry = parse_eval_results(broken).entries[-2]
    assert (entry.eps, entry.steps, entry.norm, entry.kwargs) == (None, None, None, {})
    data['variants'][1]['sanity'] = dict(passed=False, failed=['outputs_not_random'])
    data['sanity_passed'] = False
    assert parse_eval_results(data).sanity_failed == {'adv': ('outputs_not_random',)}


@pytest.fixture(scope='module')
def method_runs(run):
    """Checkpoints of the same weights recorded as trained by madry, vanilla and mbn, with every option the training
    command records (those of every method among them)."""
    from timm_advnorm.commands.train import parse_args
    saved = torch.load(run / 'last.pth.tar', weights_only=False)
    for method in ('madry', 'vanilla', 'mbn'):
        args, _ = parse_args(['-c', 'digits_demo_mbn', '--method', method])
        torch.save(dict(saved, args=args), run / f'{method}.pth.tar')
    return run


def _recipe(card: str) -> dict:
    return yaml.safe_load(card.split('## Training recipe', 1)[1].split('```yaml\n', 1)[1].split('```', 1)[0])


_OTHER_METHODS = {'clean_ratio', 'adv_weight', 'p_adv', 'noise_weight', 'shuffle_bn', 'rescale_grads', 'star_views',
                  'star_augment', 'deepaugment_net', 'tda_color_prob'}
_ATTACK = {'attack', 'attack_eps', 'attack_step', 'attack_steps', 'attack_targeted', 'attack_step_rule',
           'attack_clean_start_prob', 'attack_bn_stats'}


@pytest.mark.parametrize('method, present, absent, papers', [
    ('madry', _ATTACK, _OTHER_METHODS | {'alpha', 'pairing_weight'}, ['1706.06083', '1906.03787']),
    ('vanilla', set(), _OTHER_METHODS | _ATTACK | {'alpha', 'pairing_weight'}, []),
    ('mbn', _ATTACK | {'alpha', 'pairing_weight'}, _OTHER_METHODS, ['1906.03787', '1911.09665']),
])
def test_card_lists_only_the_options_and_papers_of_the_run_s_method(method_runs, tmp_path, method, present, absent,
                                                                     papers):
    card = _card(method_runs, tmp_path, checkpoint=f'{method}.pth.tar')
    recipe = _recipe(card)
    assert recipe['method'] == method and present <= set(recipe) and not absent & set(recipe)
    assert {'epochs', 'lr', 'val_attack_steps', 'seed'} <= set(recipe)  # the command's own options stay
    if papers:
        listed = _body(card).split('- **Papers:**\n', 1)[1].split('\n- ', 1)[0].splitlines()
        assert [line.rsplit('/', 1)[1] for line in listed] == papers
    else:
        assert '**Papers:**' not in card and 'arxiv' not in card
    assert f'trained with the `{method}` method' in card


def test_the_recipe_passes_back_to_the_training_command(method_runs, tmp_path):
    from timm_advnorm.commands.train import parse_args
    recipe = _recipe(_card(method_runs, tmp_path, checkpoint='madry.pth.tar'))
    (tmp_path / 'recipe.yaml').write_text(yaml.safe_dump(recipe))
    args, _ = parse_args(['-c', str(tmp_path / 'recipe.yaml')])
    recorded = vars(torch.load(method_runs / 'madry.pth.tar', weights_only=False)['args'])
    assert all(getattr(args, key) == recorded[key] for key in recipe)


def test_card_opens_with_the_headline_of_the_branch_the_model_loads_on(run, tmp_path):
    body = _body(_card(run, tmp_path, '--results', run / 'results-full.json'))
    assert body.split('\n\n')[2] == (
        "**Headline:** 37.50% top-1 under xie2020: pgd-t-2000 (white-box, L∞ ε = 16/255, targeted, random target "
        "class; 2000 iterations, step 1/255, random start); 62.50% on clean images. Evaluated on the `adv` branch, "
        "the one the model loads on. Data: `digits`, split `validation`, 64 images (subset seed 0).")


def test_card_gives_parameters_and_gmacs_as_timm_s_cards(run, tmp_path):
    card = _card(run, tmp_path)
    model = timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES)
    params = sum(p.numel() for p in model.parameters())
    assert f'  - Params (M): {params / 1e6:.3g}\n  - GMACs: ' in card and '  - Image size: 32 x 32' in card
    assert '**Dataset:** scikit-learn\'s handwritten digits' in card and 'not a Hugging Face Hub dataset' in card


def test_model_stats_count_parameters_and_multiply_accumulates():
    from timm_advnorm.hub.model_stats import count_model_stats
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 8 * 6, 5)).train()
    stats = count_model_stats(model, (3, 8, 6))
    assert stats.params == (3 * 9 * 4 + 4) + (4 * 8 * 6 * 5 + 5)
    assert stats.macs == 8 * 6 * 4 * 3 * 9 + 4 * 8 * 6 * 5  # one multiply-accumulate per weight use
    assert stats.image_size == (8, 6) and model.training
    assert stats.format() == '- Params (M): 0.00108\n- GMACs: 6.14e-06\n- Image size: 8 x 6'


@pytest.mark.parametrize('dataset, hub_id', [
    ('hfds/imagenet-1k', 'ILSVRC/imagenet-1k'), ('tfds/imagenet2012', 'ILSVRC/imagenet-1k'),
    ('hfds/org/my-set', 'org/my-set'), ('torch/cifar10', 'uoft-cs/cifar10'), ('digits', None), ('', None),
    ('folder', None), ('wds/shards', None)])
def test_hub_dataset_ids(dataset, hub_id):
    from timm_advnorm.hub import card
    assert card.hub_dataset_id(dataset) == hub_id
