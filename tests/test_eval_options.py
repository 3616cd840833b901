"""The evaluation's typed options: one conversion from the command line, read (never changed) by the library."""
import copy
import dataclasses

import pytest
import torch

from timm_advnorm.commands.validate import eval_options, parse_args
from timm_advnorm.data.preprocessing import explicit_preprocessing
from timm_advnorm.eval.recorded import DataRecord, recorded_data
from timm_advnorm.eval.run.build import build_evaluation
from timm_advnorm.eval.run.distributed import DistributedInfo

pytestmark = pytest.mark.usefixtures('one_thread')


def test_the_command_line_becomes_options_grouped_by_what_reads_them(tmp_path):
    folder = tmp_path / 'imagenet-r'
    args = parse_args(['--model', 'test_mbn_resnet', '--protocol', 'imagenet-r', '--imagenet-r-dir', str(folder),
                       '--num-classes', '1000', '--model-kwargs', 'drop_rate=0.1', '--img-size', '32',
                       '--mean', '0.5', '0.5', '0.5', '--amp', '--amp-dtype', 'float16', '--verify-amp', '4',
                       '-b', '16', '-j', '0', '--no-fold-bn', '--no-progress', '--attack-steps', '7', '--reduced',
                       '--sanity-steps', '3', '--metrics', 'margin', '--gammas', '0', '0.5',
                       '--results-file', str(tmp_path / 'r.json'), '--plan'])
    options = eval_options(args)
    assert options.model.name == 'test_mbn_resnet' and options.model.num_classes == 1000
    assert options.model.kwargs == {'drop_rate': 0.1} and options.model.checkpoint == ''
    assert options.data.ood_folders == {'imagenet-r': str(folder)}  # only the sets given
    assert options.data.record == DataRecord() and options.data.data_dir is None
    assert options.preprocessing.img_size == 32 and options.preprocessing.mean == (0.5, 0.5, 0.5)
    assert explicit_preprocessing(options.preprocessing.as_args()) == explicit_preprocessing(vars(args))
    assert options.runtime.autocast == 'float16' and not options.runtime.fold_bn and not options.runtime.progress
    assert (options.runtime.batch_size, options.runtime.workers, options.runtime.seed) == (16, 0, 42)
    assert options.attacks.protocol == 'imagenet-r' and options.attacks.steps == (7,) and options.attacks.reduced
    assert options.attacks.attacks == () and options.attacks.share_budgets
    assert options.checks.sanity == 'budget' and options.checks.sanity_pinned == {'steps': 3}
    assert options.checks.metrics == ('margin',) and options.checks.amp_samples == 4
    assert options.variants.gammas == (0.0, 0.5) and options.variants.interpolations is None  # not given: the default
    assert options.outputs.results_file == str(tmp_path / 'r.json') and options.plan_only
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.runtime.seed = 0


def test_a_positional_root_is_the_data_dir_and_no_amp_is_full_precision(tmp_path):
    options = eval_options(parse_args([str(tmp_path), '--model', 'test_mbn_resnet', '--sanity-samples', '0']))
    assert options.data.data_dir == str(tmp_path) and options.runtime.autocast is None
    assert options.checks.sanity == 'off' and options.checks.sanity_pinned == {'samples': 0}
    assert options.attacks.protocol is None and options.checks.metrics is None


def _training_checkpoint(path, **recorded):
    """A checkpoint file recording a training run's data options (the run's ``method`` marks a train_adv.py one)."""
    torch.save({'state_dict': {}, 'args': dict(method='pgd', **recorded)}, path)
    return str(path)


def test_recorded_data_takes_what_is_not_given_and_leaves_the_options_alone(tmp_path):
    checkpoint = _training_checkpoint(tmp_path / 'run.pth.tar', dataset='digits', data_dir='/recorded',
                                      val_split='val', class_map='')
    data = dict(dataset='', data_dir=None, val_split='validation', class_map='')
    given = copy.deepcopy(data)
    record = recorded_data(checkpoint, data, {'val_split'})
    assert record.recorded and record.taken == dict(dataset='digits', data_dir='/recorded')
    assert record.overridden == dict(val_split=('val', 'validation'))  # an unset class map is no record
    assert data == given

    record = recorded_data(checkpoint, dict(data, dataset='mnist5k'), {'dataset'})
    assert record.taken == {} and record.overridden == dict(dataset=('digits', 'mnist5k'))  # the root is digits'
    assert recorded_data(str(tmp_path / 'missing.pth'), data, ()) == DataRecord()


def test_building_an_evaluation_leaves_its_options_as_they_were(digits_dir, tmp_path):
    options = eval_options(parse_args([
        '--model', 'test_mbn_resnet', '--dataset', 'digits', '--data-dir', str(digits_dir), '--num-samples', '8',
        '-b', '8', '-j', '0', '--attacks', 'fgsm', '--attack-eps', '8', '--sanity-steps', '2', '--no-progress',
        '--device', 'cpu', '--resume-state', str(tmp_path / 'state.jsonl')]))
    before = copy.deepcopy(options)
    setup = build_evaluation(options, DistributedInfo())
    assert options == before
    assert len(setup.runs[0].indices) == 8 and setup.protocol.attacks[0].attack == 'fgsm'
    assert setup.plan.sanity.steps == 2  # the pinned probe value, kept by the budget
