"""Out-of-distribution protocols: the shipped wnid lists, the 200-class restriction and label mapping, the refusal of
a folder of other classes, and the layout of ``imagenet-r`` and ``nofrost-star`` results, on small synthetic folders
laid out like the released sets (one folder per class named by wnid, a few tiny images)."""
import csv
import json
import pkgutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from PIL import Image
from torchvision.transforms import ToTensor

from timm_advnorm.attacks import InputSpace
from timm_advnorm.commands import validate as validate_adv
from timm_advnorm.eval.plan.stages import CleanStage, EvalContext
from timm_advnorm.eval.plan.variants import Variant
from timm_advnorm.eval.protocols import ood
from timm_advnorm.eval.protocols.ood import (
    OOD_DATASETS, ClassSubset, check_class_folders, create_ood_dataset, get_ood_dataset, imagenet_wnids)
from timm_advnorm.eval.protocols.protocol import Protocol, get_protocol
from timm_advnorm.eval.run.data import IndexedSubset
from timm_advnorm.eval.run.evaluator import RobustEvaluator

pytestmark = pytest.mark.usefixtures('one_thread')

#: Positions (among a set's sorted wnids) of the classes the synthetic folders hold images of; every other class
#: folder is empty, so a label taken from a folder's position among those holding images would be wrong.
FILLED = (5, 120, 199)


def _image(path: Path, red: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new('RGB', (12, 12), (red, 40, 90)).save(path, format='PNG')


def _layout(root: Path, wnids, filled=FILLED, per_class: int = 2) -> Path:
    """A folder laid out like a released set: a folder per wnid, `per_class` images in the `filled` ones, and the
    README file ImageNet-A ships at its top."""
    for i, wnid in enumerate(wnids):
        (root / wnid).mkdir(parents=True, exist_ok=True)
        if i in filled:
            for k in range(per_class):
                _image(root / wnid / f'{k}.png', imagenet_wnids().index(wnid) % 256)
    (root / 'README.txt').write_text('synthetic\n')
    return root


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp('ood')
    return {name: _layout(root / name, dataset.wnids) for name, dataset in OOD_DATASETS.items()}


def _timm_info(name: str) -> str:
    return pkgutil.get_data('timm.data', f'_info/{name}').decode()


@pytest.mark.parametrize('name', ['imagenet-r', 'imagenet-a'])
def test_shipped_lists_are_200_sorted_imagenet_wnids_copied_from_timm(name):
    dataset = get_ood_dataset(name)
    shipped = (Path(ood.__file__).parent / dataset.wnids_file).read_text()
    assert shipped == _timm_info(f'{name.replace("-", "_")}_synsets.txt')  # byte for byte, as the docstring says
    wnids = dataset.wnids
    assert len(wnids) == len(set(wnids)) == 200 and list(wnids) == sorted(wnids)
    assert set(wnids) <= set(imagenet_wnids()) and len(imagenet_wnids()) == 1000
    indices = [int(line) for line in _timm_info(f'{name.replace("-", "_")}_indices.txt').split()]
    assert dataset.logit_indices() == indices


def test_the_sets_are_found_by_name_in_a_read_only_registry():
    assert list(OOD_DATASETS) == ['imagenet-r', 'imagenet-a', 'imagenet-sketch']
    assert all(get_ood_dataset(name) is dataset and dataset.name == name for name, dataset in OOD_DATASETS.items())
    with pytest.raises(ValueError, match=r"^Unknown out-of-distribution data set 'imagenet-b'; available: "
                                         r"imagenet-r, imagenet-a, imagenet-sketch\.$"):
        get_ood_dataset('imagenet-b')
    with pytest.raises(TypeError):
        OOD_DATASETS['imagenet-b'] = OOD_DATASETS['imagenet-r']


def test_imagenet_sketch_has_every_imagenet_class_in_imagenet_order():
    sketch = get_ood_dataset('imagenet-sketch')
    assert sketch.wnids == imagenet_wnids() and sketch.logit_indices() is None
    assert list(sketch.wnids) == sorted(sketch.wnids)  # the order of the class folders and of the logits agree


def test_labels_follow_each_folders_wnid_not_its_position_among_filled_folders(folders):
    dataset = create_ood_dataset(get_ood_dataset('imagenet-r'), folders['imagenet-r'], ToTensor())
    assert sorted({label for _, label in (dataset[i] for i in range(len(dataset)))}) == list(FILLED)
    assert len(dataset) == len(FILLED) * 2


class _FavoursTench(nn.Module):
    """Logits that favour ImageNet class 0 (tench, not an ImageNet-R class), then the class the image's red value
    encodes (its ImageNet index, as `_layout` paints it)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        own = (x[:, 0, 0, 0] * 255).round().long()
        logits = torch.zeros(len(x), 1000)
        logits[:, 0] = 10.0
        logits[torch.arange(len(x)), own] = 5.0
        return logits


@pytest.mark.parametrize('restricted', [True, False])
def test_a_model_favouring_a_class_outside_the_200_is_scored_within_them(tmp_path, restricted):
    imagenet_r = get_ood_dataset('imagenet-r')
    assert 'n01440764' == imagenet_wnids()[0] and 'n01440764' not in imagenet_r.wnids
    # ImageNet-R classes whose ImageNet index fits the red channel (2, 4, 6, 8), none labelled 0 as tench is
    filled = [i for i, index in enumerate(imagenet_r.logit_indices()) if index < 256][1:5]
    dataset = create_ood_dataset(imagenet_r, _layout(tmp_path / 'r', imagenet_r.wnids, filled), ToTensor())
    classes = imagenet_r.logit_indices() if restricted else None
    evaluator = RobustEvaluator(_FavoursTench(), [Variant('model')], [CleanStage()],
                                EvalContext(InputSpace(), (3, 12, 12)), 200 if restricted else 1000, len(dataset), 0,
                                torch.device('cpu'), classes=classes)
    indices = list(range(len(dataset)))
    records = evaluator.run(torch.utils.data.DataLoader(IndexedSubset(dataset, indices, indices), batch_size=4))
    correct = [c for record in records for c in record['columns']['correct']]
    preds = [p for record in records for p in record['columns']['pred']]
    assert len(correct) == 2 * len(filled)
    if restricted:  # the ImageNet-R label of each image, 0..199 in sorted-wnid order
        assert all(correct) and sorted(set(preds)) == filled
    else:  # the 1000-way prediction is tench: never an ImageNet-R class
        assert not any(correct) and set(preds) == {0}


def test_class_subset_keeps_the_listed_logits_in_order():
    model = nn.Linear(3, 6)
    x = torch.randn(2, 3)
    subset = ClassSubset(model, torch.tensor([4, 1]))
    assert torch.equal(subset(x), model(x)[:, [4, 1]])


def test_a_folder_of_other_classes_is_refused_naming_what_differs(folders, tmp_path):
    imagenet_val = folders['imagenet-sketch']  # ImageNet's 1000 class folders, as in its validation set
    with pytest.raises(ValueError, match=r'is not ImageNet-R: .* has 800 folders that are not its classes '
                                         r'\(n01440764, n01491361, n01496331 and 797 more\)$'):
        check_class_folders(imagenet_val, get_ood_dataset('imagenet-r'))
    with pytest.raises(ValueError, match=r'is not ImageNet-Sketch: .*no folder for 800 of its classes'):
        check_class_folders(folders['imagenet-r'], get_ood_dataset('imagenet-sketch'))
    with pytest.raises(ValueError, match='is not ImageNet-A'):
        check_class_folders(folders['imagenet-r'], get_ood_dataset('imagenet-a'))
    with pytest.raises(FileNotFoundError, match='--imagenet-a-dir .*missing: no such folder'):
        check_class_folders(tmp_path / 'missing', get_ood_dataset('imagenet-a'))
    hidden = _layout(tmp_path / 'a', get_ood_dataset('imagenet-a').wnids, filled=())
    (hidden / '.cache').mkdir()
    check_class_folders(hidden, get_ood_dataset('imagenet-a'))  # hidden folders and files are not classes
    with pytest.raises(ValueError, match='hold no image'):
        create_ood_dataset(get_ood_dataset('imagenet-a'), hidden, ToTensor())


def test_the_protocols_read_their_sets_at_the_papers_budgets():
    for name, dataset in OOD_DATASETS.items():
        protocol = get_protocol(name)
        assert protocol.attacks == () and protocol.dataset == name and protocol.headline == 'clean'
    star = get_protocol('nofrost-star')
    assert star.dataset is None and star.ood == ('imagenet-r', 'imagenet-sketch')
    assert [spec.label for spec in star.attacks[:75]] == [spec.label for spec in get_protocol('corruptions').attacks]
    pgd, square = star.attacks[75:]
    nofrost = {spec.label: spec for spec in get_protocol('nofrost').attacks}
    assert pgd == nofrost['pgd'] and square == nofrost['square']  # §4.1: eps 8, 20 iterations, 400 queries
    assert (pgd.eps, pgd.steps, square.eps, square.queries) == (8.0, 20, 8.0, 400)
    # the description of a protocol without data sets stays as it was (state files of evaluations under way)
    assert 'ood' not in get_protocol('nofrost').to_dict() and star.to_dict()['ood'] == ['imagenet-r', 'imagenet-sketch']


@pytest.mark.parametrize('kwargs, message', [
    (dict(attacks=(), dataset='imagenet-b'), "^Protocol 'p': Unknown out-of-distribution data set 'imagenet-b'; "
                                             "available: imagenet-r, imagenet-a, imagenet-sketch"),
    (dict(attacks=(), dataset='imagenet-r', ood=('imagenet-r',)), 'reads a data set twice'),
    (dict(attacks=(), dataset='imagenet-r'), "headline is the clean accuracy"),
    (dict(attacks=()), 'has no attacks'),
])
def test_a_malformed_protocol_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Protocol('p', 'd', 'r', **kwargs)


def _argv(out: Path, *extra):
    argv = ['--model', 'test_mbn_resnet', '--num-samples', 4, '-b', 4, '-j', 0, '--sanity', 'full',
            '--sanity-samples', 4, '--sanity-steps', 2, '--sanity-queries', 5, '--no-progress', '--results-file', out / 'results.json', *extra]
    return [str(a) for a in argv]


def test_imagenet_r_results_name_the_set_and_score_its_200_classes(folders, tmp_path):
    assert validate_adv.run('validate_adv.py', _argv(tmp_path, '--protocol', 'imagenet-r', '--imagenet-r-dir',
                                                     folders['imagenet-r'], '--gammas', '0', '0.5', '1',
                                                     '--plot-dir', tmp_path / 'plots')) == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    assert 'accuracy_vs_eps.png' in results['plots'] and 'gamma_tradeoff.png' not in results['plots']  # no robust
    assert results['dataset'] == 'imagenet-r' and results['split'] is None and results['num_samples'] == 4
    assert results['ood_data']['imagenet-r']['classes'] == 200
    assert results['protocol']['dataset'] == 'imagenet-r'
    for variant in results['variants']:
        assert variant['attacks'] == [] and variant['ood'] == {}
        assert variant['scores'] == {'imagenet-r': variant['clean']} and variant['robust'] == variant['clean']
        chance = next(c for c in variant['sanity']['checks'] if c['name'] == 'outputs_not_random')
        assert chance['details']['num_classes'] == 200
    assert [v['name'] for v in results['variants']] == ['clean', 'mix@0.5', 'logits@0.5', 'adv']


def test_nofrost_star_reports_every_set_and_attack_in_one_file_and_resumes(folders, digits_dir, tmp_path):
    (tmp_path / 'digits.txt').write_text(''.join(f'{digit}\n' for digit in range(10)))  # ImageNet's first 10 classes
    argv = _argv(tmp_path, '--dataset', 'digits', '--data-dir', digits_dir, '--num-classes', 1000, '--protocol',
                 'nofrost-star', '--reduced', '--gammas', '1', '--imagenet-r-dir', folders['imagenet-r'],
                 '--imagenet-sketch-dir', folders['imagenet-sketch'], '--resume-state', tmp_path / 'state.jsonl',
                 '--class-map', tmp_path / 'digits.txt')
    assert validate_adv.run('validate_adv.py', argv) == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    (variant,) = results['variants']
    # the columns of NoFrost* Figures 3 and 4, attacks named by the (reduced) budgets that ran
    assert list(variant['scores']) == ['clean', 'imagenet-c', 'imagenet-r', 'imagenet-sketch', 'pgd-3', 'square-7']
    corrupted = [a['accuracy'] for a in variant['attacks'] if a['attack'] == 'corruption']
    assert len(corrupted) == 75 and variant['scores']['imagenet-c'] == pytest.approx(sum(corrupted) / 75, abs=1e-3)
    assert variant['scores']['imagenet-r'] == variant['ood']['imagenet-r']['accuracy']
    assert variant['ood']['imagenet-r']['samples'] == variant['ood']['imagenet-sketch']['samples'] == 4
    assert {name: data['classes'] for name, data in results['ood_data'].items()} == {
        'imagenet-r': 200, 'imagenet-sketch': 1000}
    assert results['dataset'] == 'digits' and variant['robust_label'] == 'pgd-3'
    rows = {row['attack']: row for row in csv.DictReader((tmp_path / 'results.csv').open())}
    assert rows['imagenet-r']['samples'] == '4' and float(rows['imagenet-sketch']['accuracy']) == \
        variant['ood']['imagenet-sketch']['accuracy']

    assert validate_adv.run('validate_adv.py', argv + ['--overwrite']) == 0  # every unit read back, none recomputed
    resumed = json.loads((tmp_path / 'results.json').read_text())
    assert resumed['units_computed'] == 0 and resumed['variants'][0]['scores'] == variant['scores']
