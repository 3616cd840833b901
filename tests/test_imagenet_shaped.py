"""The ImageNet-scale path end to end on CPU: a full-size mixture-BN ResNet-50 at 224 px, trained with gradient
checkpointing under bf16 autocast on an image folder laid out like ImageNet, then evaluated with the reduced xie2020
protocol, as a user would smoke-test a recipe before launching it on the real data."""
import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from imagenet_layout import IMAGENET_WNIDS, write_imagenet_folder

IMG_SIZE = 224


@pytest.fixture(scope='module')
def imagenet_dir(tmp_path_factory) -> Path:
    """``train/`` with one JPEG per class and ``val/`` with one, four WordNet-id classes."""
    return write_imagenet_folder(tmp_path_factory.mktemp('imagenet'), images_per_class=(1, 1), size=IMG_SIZE)


@pytest.fixture(scope='module')
def trained_run(imagenet_dir, tmp_path_factory) -> Path:
    """Two steps of two images of mixture-BN training (PGD-1), the robust validation on one image."""
    from timm_advnorm.commands.train import main
    output = tmp_path_factory.mktemp('runs')
    assert main([
        '--dataset', '', '--data-dir', str(imagenet_dir), '--val-split', 'val',
        '--num-classes', str(len(IMAGENET_WNIDS)), '--img-size', str(IMG_SIZE),
        '--model', 'mbn_resnet50', '--method', 'mbn', '--grad-checkpointing', '--amp',
        '-b', '2', '--epochs', '1', '--attack-steps', '1', '--val-attack-steps', '1', '--num-samples', '1',
        '--workers', '0', '--log-interval', '0', '--no-progress', '--device', 'cpu',
        '--output', str(output), '--experiment', 'run']) == 0
    return output / 'run'


def test_training_writes_checkpoint_summary_and_its_arguments(trained_run):
    args = yaml.safe_load((trained_run / 'args.yaml').read_text())
    assert args['grad_checkpointing'] is True
    assert args['amp'] is True  # --amp is bfloat16 autocast: training has no other dtype
    assert args['img_size'] == IMG_SIZE and args['model'] == 'mbn_resnet50' and args['method'] == 'mbn'
    with open(trained_run / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert [row['epoch'] for row in rows] == ['0']
    assert float(rows[0]['train_passes_per_image']) == 3.0  # PGD-1 + clean + adversarial pass
    checkpoint = torch.load(trained_run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['args']['grad_checkpointing'] and checkpoint['args']['img_size'] == IMG_SIZE
    # two steps, each counted once by every BN layer of both branches, recomputed blocks included
    batches = {k: int(v) for k, v in checkpoint['state_dict'].items() if k.endswith('num_batches_tracked')}
    assert any('.adv_bn.' in k for k in batches) and set(batches.values()) == {2}
    assert all(torch.isfinite(v).all() for v in checkpoint['state_dict'].values() if v.is_floating_point())


def test_reduced_xie2020_evaluation_of_the_checkpoint(trained_run, imagenet_dir, tmp_path):
    """The checkpoint's adversarial branch (the one its method ranks checkpoints by) under the reduced protocol."""
    from timm_advnorm.commands.validate import main
    results_file = tmp_path / 'xie2020.json'
    assert main([
        '--checkpoint', str(trained_run / 'last.pth.tar'), '--data-dir', str(imagenet_dir), '--val-split', 'val',
        '--protocol', 'xie2020', '--reduced', '--gammas', '1', '--amp', '--num-samples', '1', '--sanity-samples',
        '0', '--workers', '0', '--no-progress', '--device', 'cpu', '--results-file', str(results_file)]) == 0
    assert results_file.with_suffix('.csv').exists()
    results = json.loads(results_file.read_text())
    assert results['img_size'] == IMG_SIZE and results['data_config']['input_size'] == [3, IMG_SIZE, IMG_SIZE]
    assert results['preprocessing']['source'] == 'the checkpoint'
    assert results['protocol']['name'] == 'xie2020' and results['protocol']['reduced'] is True
    assert results['amp'] == 'bfloat16'
    assert results['inference_branch'] == 'adv'
    assert [variant['name'] for variant in results['variants']] == ['adv']
    # the cube roots of Xie & Yuille's 10 to 2000 iterations
    attacks = results['variants'][0]['attacks']
    assert [attack['label'] for attack in attacks] == ['pgd-t-2', 'pgd-t-3', 'pgd-t-5', 'pgd-t-8', 'pgd-t-13']
    assert results['num_samples'] == 1
