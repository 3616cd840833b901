"""The robust-evaluation loop: resumption, sharding, cascades, targets, per-unit seeding and shared PGD budgets."""
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from timm_advnorm.attacks import InputSpace
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import RESULT_COLUMNS, AttackStage, CleanStage, EvalContext
from timm_advnorm.eval.plan.variants import model_variants
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol, get_protocol, reduce_protocol
from timm_advnorm.eval.run.data import IndexedSubset, seeded_subset, shard_range, target_offsets
from timm_advnorm.eval.run.evaluator import RobustEvaluator, derive_seed
from timm_advnorm.eval.run.records import ResultTable
from timm_advnorm.eval.run.state import EvalState

NUM_SAMPLES, NUM_CLASSES = 24, 10


pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def data():
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(40, 3, 16, 16, generator=generator)
    y = torch.randint(0, NUM_CLASSES, (40,), generator=generator)
    return InputSpace().from_pixels(x), y


@pytest.fixture
def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, NUM_CLASSES))


def _protocol(aggregation='independent') -> Protocol:
    specs = (
        AttackSpec('pgd-t', attack_config('pgd', steps=3, targeted=True), 8.0, success_rate=True),
        AttackSpec('pgd', attack_config('pgd', steps=3), 8.0),
        AttackSpec('fgsm', attack_config('fgsm'), 8.0),
    )
    return Protocol('test', 'test', 'test', specs, aggregation=aggregation, worst_case=True, headline='worst-case')


def _run(model, data, protocol, positions=range(NUM_SAMPLES), batch_size=8, state=None, sanity_samples=0,
         **plan_kwargs):
    x, y = data
    indices = seeded_subset(len(x), NUM_SAMPLES, seed=0)
    loader = DataLoader(IndexedSubset(TensorDataset(x, y), indices, positions), batch_size=batch_size)
    plan = build_plan(protocol, sanity_samples=sanity_samples, sanity_steps=2, sanity_queries=5, **plan_kwargs)
    ctx = EvalContext(InputSpace(), (3, 16, 16))
    evaluator = RobustEvaluator(model, model_variants(model), plan.stages, ctx, NUM_CLASSES, NUM_SAMPLES, seed=0,
                                device=torch.device('cpu'), state=state)
    return evaluator, evaluator.run(loader)


def _assert_same_tables(a, b):
    assert sorted(a._parts) == sorted(b._parts)
    for variant, stage in a._parts:
        left, right = a.get(variant, stage), b.get(variant, stage)
        assert left.keys() == right.keys()
        for name in left:
            np.testing.assert_array_equal(left[name], right[name], err_msg=f'{stage}/{name}')


def test_an_interrupted_evaluation_resumes_where_it_stopped(model, data, tmp_path):
    protocol = _protocol()
    path = tmp_path / 'state.jsonl'
    _, full = _run(model, data, protocol, state=EvalState(path, dict(test=1)))
    total = len(full)
    lines = path.read_bytes().split(b'\n')
    kept = 5
    path.write_bytes(b'\n'.join(lines[:1 + kept]) + b'\n' + lines[1 + kept][:10])  # killed while appending
    evaluator, resumed = _run(model, data, protocol, state=EvalState(path, dict(test=1)))
    assert evaluator.computed == total - kept
    _assert_same_tables(ResultTable(full), ResultTable(resumed))
    evaluator, again = _run(model, data, protocol, state=EvalState(path, dict(test=1)))
    assert evaluator.computed == 0
    _assert_same_tables(ResultTable(full), ResultTable(again))


@pytest.mark.parametrize('batch_size, world_size', [(4, 2), (5, 2), (7, 3)])
def test_disjoint_shards_reproduce_the_single_process_run(model, data, batch_size, world_size):
    """Also when the shards' sizes are not multiples of the batch size (24 samples in batches of 5 or 7)."""
    protocol = _protocol()
    _, single = _run(model, data, protocol, batch_size=batch_size)
    shards = []
    for rank in range(world_size):
        start, stop = shard_range(NUM_SAMPLES, rank, world_size, batch_size)
        shards += _run(model, data, protocol, positions=range(start, stop), batch_size=batch_size)[1]
    _assert_same_tables(ResultTable(single), ResultTable(shards))


def test_shard_ranges_are_whole_batches_covering_the_subset():
    for n, world, batch in ((10, 3, 1), (2, 4, 1), (24, 2, 5), (24, 3, 7), (5, 4, 2)):
        ranges = [shard_range(n, r, world, batch) for r in range(world)]
        covered = [p for start, stop in ranges for p in range(start, stop)]
        assert covered == list(range(n))
        assert all(start % batch == 0 for start, stop in ranges if stop > start)
        counts = [-(-(stop - start) // batch) for start, stop in ranges]
        assert max(counts) - min(counts) <= 1


def test_cascade_attacks_only_the_survivors(model, data):
    protocol = _protocol('cascade')
    _, records = _run(model, data, protocol)
    table = ResultTable(records)
    previous = table.column('model', 'clean', 'correct')
    for spec in protocol.attacks:
        columns = table.get('model', spec.label)
        assert np.array_equal(columns['attacked'], previous)  # survivors exactly, targeted or not
        assert not np.any(columns['correct'] & ~previous)
        previous = columns['correct']


def test_targeted_attacks_hit_every_sample_with_a_fixed_other_class(model, data):
    _, records = _run(model, data, _protocol())
    table = ResultTable(records)
    columns = table.get('model', 'pgd-t')
    assert columns['attacked'].all()
    offsets = target_offsets(NUM_SAMPLES, NUM_CLASSES, seed=0)
    assert ((offsets >= 1) & (offsets < NUM_CLASSES)).all()  # the target is never the label
    untargeted = table.get('model', 'pgd')
    clean = table.column('model', 'clean', 'correct')
    assert np.array_equal(untargeted['attacked'], clean)


def test_budgets_are_respected(model, data):
    _, records = _run(model, data, _protocol())
    table = ResultTable(records)
    for label in ('pgd-t', 'pgd', 'fgsm'):
        assert table.column('model', label, 'linf').max() <= 8.0 + 1e-3


def test_unit_seeds_are_stable_and_distinct():
    assert derive_seed(0, 'adv', 'pgd', 8) == derive_seed(0, 'adv', 'pgd', 8)
    assert len({derive_seed(0, 'adv', 'pgd', s) for s in range(100)}) == 100
    assert 0 <= derive_seed('x') < 2 ** 63


def test_seeded_subset_is_reproducible_complete_when_asked_and_in_random_order():
    subset = seeded_subset(1000, 50, seed=3)
    assert subset == seeded_subset(1000, 50, seed=3) and len(set(subset)) == 50
    assert subset != seeded_subset(1000, 50, seed=4)
    assert sorted(seeded_subset(10, 0, seed=0)) == list(range(10))
    # a dataset listed class by class (100 images per class): any prefix, e.g. the sanity one, spans the classes
    prefix_classes = {index // 100 for index in seeded_subset(1000, 0, seed=0)[:64]}
    assert len(prefix_classes) == 10


def test_readable_subset_finds_unreadable_images_and_replaces_them_in_seeded_order(tmp_path):
    from PIL import Image
    from timm.data import ImageDataset

    from timm_advnorm.data.readable import find_unreadable, readable_subset

    for i in range(20):
        path = tmp_path / str(i % 2) / f'{i:02d}.png'
        path.parent.mkdir(exist_ok=True)
        Image.new('RGB', (4, 4), (i, 0, 0)).save(path)
    dataset = ImageDataset(str(tmp_path))
    order = seeded_subset(20, 0, seed=0)
    assert readable_subset(dataset, order, 8, skip_unreadable=True) == (seeded_subset(20, 8, 0), {})
    bad = order[:2] + order[9:10]  # two in the subset of 8, one among the images that replace them
    for index in bad:
        Path(dataset.filename(index, absolute=True)).write_bytes(b'\x89PNG\r\n\x1a\n cut')
    found = find_unreadable(dataset, range(20))
    assert sorted(found) == sorted(bad) and all(found[i][0] == dataset.filename(i) and found[i][1] for i in bad)
    assert readable_subset(dataset, order, 8, skip_unreadable=False) == (order[:8], {i: found[i] for i in bad[:2]})
    assert readable_subset(dataset, order, 8, skip_unreadable=True) == (
        [i for i in order if i not in bad][:8], {i: found[i] for i in bad})
    assert readable_subset(dataset, order, 0, skip_unreadable=True)[0] == [i for i in order if i not in bad]
    assert find_unreadable(TensorDataset(torch.zeros(3, 1)), [0, 1]) == {}  # it raises on a bad sample itself


def test_model_mode_is_restored(model, data):
    model.train()
    _run(model, data, reduce_protocol(get_protocol('xie2020'), max_steps=1), sanity_samples=4)
    assert model.training and all(m.training for m in model.modules())


def _sweep_protocol() -> Protocol:
    """Targeted PGD-2/5/8 at one step (one run), one with another step and an untargeted PGD-5 (runs of their own)."""
    def spec(label, steps, step=4.0, targeted=True):  # ε=64: this random-init model is fooled gradually
        return AttackSpec(label, attack_config('pgd', steps=steps, step=step, step_rule='fixed', targeted=targeted),
                          64.0)
    specs = (spec('pgd-2', 2), spec('pgd-8', 8), spec('pgd-5', 5), spec('pgd-5-step1', 5, step=1.0),
             spec('pgd-u-5', 5, targeted=False))
    return Protocol('sweep', 'sweep', 'test', specs)


def test_pgd_budgets_of_one_attack_share_the_run_of_the_longest():
    plan = build_plan(_sweep_protocol(), sanity_samples=0)
    kinds = [(type(stage).__name__, stage.name) for stage in plan.stages]
    assert kinds == [('CleanStage', 'clean'), ('AttackStage', 'pgd-8'), ('BudgetStage', 'pgd-2'),
                     ('BudgetStage', 'pgd-5'), ('AttackStage', 'pgd-5-step1'), ('AttackStage', 'pgd-u-5')]
    assert plan.stage('pgd-8').shorter_budgets == (2, 5)
    assert plan.stage('pgd-2').source == 'pgd-8'
    separate = build_plan(_sweep_protocol(), sanity_samples=0, share_budgets=False)
    assert [stage.name for stage in separate.stages] == ['clean'] + [s.label for s in _sweep_protocol().attacks]
    assert all(type(stage).__name__ != 'BudgetStage' for stage in separate.stages)
    cascade = build_plan(replace(_sweep_protocol(), aggregation='cascade'), sanity_samples=0)
    assert all(type(stage).__name__ != 'BudgetStage' for stage in cascade.stages)


def test_budgets_read_off_one_run_are_those_attacks_and_never_help_the_model(model, data):
    """Each shorter budget's columns equal its own attack run with the source's seed; accuracy falls with budget."""
    protocol = _sweep_protocol()
    _, records = _run(model, data, protocol)
    shared = ResultTable(records)
    success = {n: shared.column('model', f'pgd-{n}', 'success').astype(bool) for n in (2, 5, 8)}
    assert success[2].sum() < success[8].sum() < NUM_SAMPLES, 'the budgets must differ in strength'
    assert not np.any(success[2] & ~success[5]) and not np.any(success[5] & ~success[8])

    x, y = data
    indices = seeded_subset(len(x), NUM_SAMPLES, seed=0)
    loader = DataLoader(IndexedSubset(TensorDataset(x, y), indices, range(NUM_SAMPLES)), batch_size=8)
    spec_5 = next(spec for spec in protocol.attacks if spec.label == 'pgd-5')
    alone = [CleanStage(), AttackStage(spec_5, attack_all=True, name='pgd-8')]  # the source's name: same seeds
    evaluator = RobustEvaluator(model, model_variants(model), alone, EvalContext(InputSpace(), (3, 16, 16)),
                                NUM_CLASSES, NUM_SAMPLES, seed=0, device=torch.device('cpu'))
    reference = ResultTable(evaluator.run(loader))
    for name in RESULT_COLUMNS + ('attacked', 'position'):
        np.testing.assert_allclose(shared.column('model', 'pgd-5', name), reference.column('model', 'pgd-8', name),
                                   atol=1e-6, err_msg=name)


@pytest.mark.parametrize('protocol', [_protocol(), _sweep_protocol()], ids=['attack', 'shared-budget'])
def test_the_fp32_reference_attack_starts_where_the_checked_one_did(model, data, protocol):
    """Without autocast the AMP check compares fp32 with fp32, so it must agree sample for sample: it may only
    differ by precision, not by random start (also when the checked attack is read off a longer run)."""
    _, records = _run(model, data, protocol, amp_samples=NUM_SAMPLES)
    table = ResultTable(records)
    checked = protocol.attacks[0].label
    for column in ('correct', 'pred', 'linf'):
        np.testing.assert_array_equal(table.column('model', f'amp-fp32/{checked}', column),
                                      table.column('model', checked, column))


def _imagenet_like_folder(root: Path, files) -> None:
    """Tiny images at the given ``<wnid>/<file>`` names of an ImageNet validation folder."""
    from PIL import Image
    for i, name in enumerate(files):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new('RGB', (8, 8), (i * 40 % 256, 0, 0)).save(path, format='PNG')


def test_the_robustbench_subset_takes_its_first_images_in_list_order(tmp_path):
    from timm.data import ImageDataset

    from timm_advnorm.eval.run.subsets import named_subset_order, subset_files

    listed = subset_files('robustbench')
    assert len(listed) == len(set(listed)) == 5000 and listed[0] == 'n09468604/ILSVRC2012_val_00015253.JPEG'
    _imagenet_like_folder(tmp_path, listed[:4] + ['n01440764/ILSVRC2012_val_00000001.JPEG'])  # one not listed
    dataset = ImageDataset(str(tmp_path))
    order = named_subset_order(dataset, 'robustbench', num_samples=3)
    assert [dataset.filename(i) for i in order] == listed[:4]  # the first 3, then what can replace them
    with pytest.raises(ValueError, match='4996 of the 5000 images of --subset robustbench are not in'):
        named_subset_order(dataset, 'robustbench')
    with pytest.raises(ValueError, match='1 of the 5 images'):
        named_subset_order(dataset, 'robustbench', num_samples=5)
    with pytest.raises(ValueError, match=r"^Unknown subset 'robustbench-10k'; available: robustbench\.$"):
        subset_files('robustbench-10k')
