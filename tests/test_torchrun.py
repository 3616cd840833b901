"""train_adv.py under torchrun as multi-node jobs launch it (c10d rendezvous), on two CPU processes (gloo): gradient
checkpointing through DistributedDataParallel, with and without synchronized mixture BN."""
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from ports import free_port

REPO = Path(__file__).resolve().parents[1]
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples', '32',
        '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0', '--no-progress']


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    """``torchrun --nnodes 1 --nproc-per-node 2`` with a c10d rendezvous on a free local port, CUDA hidden."""
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'CUDA_VISIBLE_DEVICES': '', 'HF_HUB_OFFLINE': '1'}
    command = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1', '--nproc-per-node', '2',
               '--rdzv-backend', 'c10d', '--rdzv-endpoint', f'127.0.0.1:{free_port()}', 'train_adv.py', *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize('sync_bn', [[], ['--sync-bn']], ids=['ddp', 'sync_bn'])
def test_two_processes_with_grad_checkpointing(tmp_path, digits_dir, sync_bn):
    output = tmp_path / 'runs'
    result = _torchrun('--model', 'test_mbn_resnet', '--method', 'mbn', '--grad-checkpointing', *sync_bn,
                       '--data-dir', str(digits_dir), '--output', str(output), '--experiment', 'ddp', *FAST)
    assert result.returncode == 0, result.stderr[-3000:]

    # rank 0 alone made a run folder (another rank's would be ddp-1) and wrote and logged the epoch once
    assert [p.name for p in output.iterdir()] == ['ddp']
    run = output / 'ddp'
    for name in ('args.yaml', 'last.pth.tar', 'checkpoint-0.pth.tar', 'summary.csv'):
        assert (run / name).is_file(), name
    with open(run / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert [row['epoch'] for row in rows] == ['0']
    assert float(rows[0]['eval_adv_branch_top1']) > 0
    assert 'robust_samples' not in ''.join(rows[0])  # a count, not a metric
    assert result.stderr.count('Epoch 0 (1/1)  Loss: ') == 1
    # one seeded subset, sharded across the two ranks, and the epoch's line counts its images over both
    assert '(robust: pgd2 targeted ε=16/255, 32 images)' in result.stderr
    assert re.search(r'\b2 process', result.stderr), 'the log must say the run trains on 2 processes'

    args = yaml.safe_load((run / 'args.yaml').read_text())
    assert args['grad_checkpointing'] is True and args['sync_bn'] is bool(sync_bn)
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['args']['world_size'] == 2 and checkpoint['args']['distributed']
    assert not any(k.startswith('module.') for k in checkpoint['state_dict'])
    # recomputed blocks counted no batch twice: every BN layer (both branches) saw as many batches as the stem's
    batches = {k: int(v) for k, v in checkpoint['state_dict'].items() if k.endswith('num_batches_tracked')}
    assert any('.adv_bn.' in k for k in batches)
    assert set(batches.values()) == {batches['conv1.1.num_batches_tracked']}
