"""Mixture-BN variants (branches, feature and logit interpolation), BN statistics and plots."""
import pytest
import timm
import torch

import timm_advnorm  # noqa: F401  (registers test_mbn_resnet)
from timm_advnorm.attacks import InputSpace, create_attack, fold_batchnorm
from timm_advnorm.eval.plan.variants import Variant, model_variants
from timm_advnorm.eval.results.plots import MAX_LAYER_TICKS, figure_bn_stats, figure_tradeoff, write_plots
from timm_advnorm.eval.run.bn_stats import collect_bn_stats, default_bn_layer, summarize_bn_stats
from timm_advnorm.eval.schema import EvalResults
from timm_advnorm.layers import get_route, route

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture
def mbn_model():
    """test_mbn_resnet whose adversarial branch has its own (shifted) statistics, so the branches differ."""
    torch.manual_seed(0)
    model = timm.create_model('test_mbn_resnet', num_classes=10).eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, 'adv_bn'):
                module.adv_bn.running_mean.add_(0.3)
                module.adv_bn.running_var.mul_(1.5)
    return model


def _routes(model):
    return [(name, n_clean, gamma) for _, name, n_clean, gamma in get_route(model)]


def test_gamma_sweep_maps_to_branches_and_interpolations(mbn_model):
    names = [v.name for v in model_variants(mbn_model, gammas=(1.0, 0.0, 0.5))]
    assert names == ['clean', 'mix@0.5', 'logits@0.5', 'adv']
    assert [v.name for v in model_variants(mbn_model, (0.25,), interpolations=('logits',))] == ['logits@0.25']
    plain = timm.create_model('test_resnet', num_classes=10)
    assert [v.name for v in model_variants(plain)] == ['model']
    with pytest.raises(ValueError, match='--gammas: the model has no mixture BN'):  # given, it would be ignored
        model_variants(plain, gammas=(0.0, 0.5, 1.0))
    with pytest.raises(ValueError, match='--interpolations apply at gammas strictly between 0 and 1'):
        model_variants(mbn_model, gammas=(0.0, 1.0), interpolations=('mix',))
    with pytest.raises(ValueError):
        model_variants(mbn_model, gammas=(1.5,))
    with pytest.raises(ValueError):
        Variant('mix', 1.0)


def test_each_variant_computes_its_own_function_and_restores_the_route(mbn_model):
    x = torch.randn(4, 3, 32, 32)
    before = _routes(mbn_model)
    with torch.no_grad():
        with route(mbn_model, 'clean'):
            clean = mbn_model(x)
        with route(mbn_model, 'adv'):
            adv = mbn_model(x)
        outputs = {}
        for variant in model_variants(mbn_model, gammas=(0.0, 0.5, 1.0)):
            with variant.activate(mbn_model) as net:
                outputs[variant.name] = net(x)
    assert _routes(mbn_model) == before
    assert not torch.allclose(clean, adv, atol=1e-3)
    torch.testing.assert_close(outputs['clean'], clean)
    torch.testing.assert_close(outputs['adv'], adv)
    torch.testing.assert_close(outputs['logits@0.5'], torch.lerp(clean, adv, 0.5))
    assert not torch.allclose(outputs['mix@0.5'], outputs['logits@0.5'], atol=1e-4)


@pytest.mark.parametrize('gamma', [1.0, 0.5])
def test_attacks_fold_the_branch_the_variant_selects(mbn_model, gamma):
    """Folding BN reads the route when it folds: the variant must be active by then, not switched in forward."""
    x = torch.randn(4, 3, 32, 32)
    variant = Variant('adv') if gamma == 1.0 else Variant('mix', gamma)
    with variant.activate(mbn_model) as net, torch.no_grad():
        folded = fold_batchnorm(net)
        assert folded is not net
        torch.testing.assert_close(folded(x), net(x), rtol=1e-4, atol=1e-4)


def test_the_attack_differentiates_the_evaluated_variant(mbn_model):
    """PGD against the adversarial branch with folding equals PGD against it without folding, not the clean one."""
    space = InputSpace.from_model(mbn_model)
    x, y = torch.randn(4, 3, 32, 32), torch.arange(4)
    outputs = []
    for kind, fold in (('adv', True), ('adv', False), ('clean', True)):
        attack = create_attack('pgd', space=space, eps=8.0, steps=2, random_start=False, fold_bn=fold, seed=0)
        with Variant(kind).activate(mbn_model) as net:
            outputs.append(attack(net, x, y))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=1e-3)
    assert not torch.allclose(outputs[0], outputs[2], atol=1e-3)


def test_bn_statistics_of_both_branches_are_collected_per_layer(mbn_model):
    stats = collect_bn_stats(mbn_model)
    assert stats and all(len(s['clean_mean']) == len(s['adv_var']) for s in stats.values())
    summary = summarize_bn_stats(stats)
    assert [row['layer'] for row in summary] == list(stats)
    assert all(row['mean_abs_diff'] == pytest.approx(0.3, rel=1e-4) for row in summary)
    assert all(row['var_log_ratio'] > 0 and row['frac_adv_var_larger'] == 1.0 for row in summary)
    assert collect_bn_stats(timm.create_model('test_resnet')) == {}
    assert default_bn_layer(stats) in stats


def test_plots_are_written(mbn_model, tmp_path):
    stats = collect_bn_stats(mbn_model)
    variants = [dict(name=n, kind=k, gamma=g, clean=c, robust=r, samples=8, attacks=[], eps_sweep=[])
                for n, k, g, c, r in (
                    ('clean', 'clean', 0.0, 90.0, 1.0), ('mix@0.5', 'mix', 0.5, 80.0, 20.0),
                    ('logits@0.5', 'logits', 0.5, 82.0, 18.0), ('adv', 'adv', 1.0, 60.0, 40.0))]
    results = dict(model='m', protocol=dict(name='p', reduced=False, headline='worst-case'), variants=variants,
                   bn_stats=dict(layers=summarize_bn_stats(stats)))
    assert write_plots(EvalResults.from_dict(results), tmp_path, stats) == ['gamma_tradeoff.png', 'bn_stats.png']
    assert figure_tradeoff(EvalResults.from_dict(dict(results, variants=variants[:1]))) is None
    for name in ('bn_stats.png', 'gamma_tradeoff.png'):
        assert (tmp_path / name).read_bytes()[:4] == b'\x89PNG'


def test_bn_statistics_plot_labels_every_axis_with_one_quantity_per_panel(mbn_model):
    stats = collect_bn_stats(mbn_model)
    summary = summarize_bn_stats(stats)
    fig = figure_bn_stats(stats, summary, 'm')
    assert len(fig.axes) == 4
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)
    ratio, share = fig.axes[2:]  # across depth: the log variance ratio and the share of channels, apart
    expected = ([row['var_log_ratio'] for row in summary], [100.0 * row['frac_adv_var_larger'] for row in summary])
    for ax, values in zip((ratio, share), expected):
        assert [list(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata()) == len(summary)] == [values]
    assert 'ln(' in ratio.get_ylabel() and '(%)' in share.get_ylabel()
    for ax in (ratio, share):  # depth by module name, not by index
        assert [t.get_text() for t in ax.get_xticklabels()] == list(stats)
    title = figure_bn_stats(stats, summary, 'm', run='custom protocol, digits (validation), 32 samples',
                            note='SMOKE RUN')._suptitle.get_text()
    assert title.startswith('SMOKE RUN\n') and 'evaluated on: custom protocol, digits (validation), 32 samples' in title


def test_bn_statistics_plot_names_every_kth_layer_of_a_deep_model():
    layers = [f'stages.{i // 10}.blocks.{i % 10}.bn' for i in range(100)]
    stats = {name: dict(clean_mean=[0.0] * 4, clean_var=[1.0] * 4, adv_mean=[0.1] * 4, adv_var=[2.0] * 4)
             for name in layers}
    summary = [dict(layer=name, var_log_ratio=0.7, frac_adv_var_larger=1.0) for name in layers]
    fig = figure_bn_stats(stats, summary, 'm')
    ticks = [t.get_text() for t in fig.axes[2].get_xticklabels()]
    assert 0 < len(ticks) <= MAX_LAYER_TICKS and ticks[0] == layers[0] and set(ticks) <= set(layers)
    assert '1 in 3 named' in fig.axes[2].get_xlabel()
