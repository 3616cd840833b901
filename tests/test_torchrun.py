"""train_adv.py under torchrun as multi-node jobs launch it (c10d rendezvous), on two CPU processes (gloo): gradient
checkpointing through DistributedDataParallel, with and without synchronized mixture BN."""
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from concurrent_runs import run_concurrently
from ports import free_ports

REPO = Path(__file__).resolve().parents[1]
FAST = ['--epochs', '1', '--attack-steps', '2', '--attack-step', '4', '--val-attack-steps', '2', '--num-samples', '32',
        '-b', '64', '--workers', '0', '--hflip', '0', '--log-interval', '0', '--no-progress']


# both at once: a run's time is mostly its processes' start-up and rendezvous, which overlap
CONFIGURATIONS = {'ddp': [], 'sync_bn': ['--sync-bn']}


def _torchrun_command(port: int, *args: str) -> list:
    """``torchrun --nnodes 1 --nproc-per-node 2`` with a c10d rendezvous on local `port`."""
    return [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1', '--nproc-per-node', '2',
            '--rdzv-backend', 'c10d', '--rdzv-endpoint', f'127.0.0.1:{port}', 'train_adv.py', *args]


def test_two_processes_with_grad_checkpointing(tmp_path, digits_dir):
    outputs = {name: tmp_path / name / 'runs' for name in CONFIGURATIONS}
    commands = [_torchrun_command(port, '--model', 'test_mbn_resnet', '--method', 'mbn', '--grad-checkpointing',
                                  *sync_bn, '--data-dir', str(digits_dir), '--output', str(outputs[name]),
                                  '--experiment', 'ddp', *FAST)
                for (name, sync_bn), port in zip(CONFIGURATIONS.items(), free_ports(len(CONFIGURATIONS)))]
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'CUDA_VISIBLE_DEVICES': '', 'HF_HUB_OFFLINE': '1'}  # CUDA hidden
    results = run_concurrently(commands, jobs=len(commands), timeout=300, cwd=REPO, env=env)
    for (name, sync_bn), result in zip(CONFIGURATIONS.items(), results):
        _check_run(name, sync_bn, outputs[name], result)


def _check_run(name: str, sync_bn: list, output: Path, result: subprocess.CompletedProcess) -> None:
    """What the run of configuration `name` must have done; every message starts with `name`."""
    assert result.returncode == 0, f'{name}: {result.stderr[-3000:]}'

    # rank 0 alone made a run folder (another rank's would be ddp-1) and wrote and logged the epoch once
    assert [p.name for p in output.iterdir()] == ['ddp'], name
    run = output / 'ddp'
    for file in ('args.yaml', 'last.pth.tar', 'checkpoint-0.pth.tar', 'summary.csv'):
        assert (run / file).is_file(), f'{name}: {file}'
    with open(run / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert [row['epoch'] for row in rows] == ['0'], name
    assert float(rows[0]['eval_adv_branch_top1']) > 0, name
    assert result.stderr.count('Epoch 0 (1/1)  Loss: ') == 1, name
    assert re.search(r'\b2 process', result.stderr), f'{name}: the log must say the run trains on 2 processes'

    args = yaml.safe_load((run / 'args.yaml').read_text())
    assert args['grad_checkpointing'] is True and args['sync_bn'] is bool(sync_bn), name
    checkpoint = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=False)
    assert checkpoint['args'].world_size == 2 and checkpoint['args'].distributed, name
    assert not any(k.startswith('module.') for k in checkpoint['state_dict']), name
    # recomputed blocks counted no batch twice: every BN layer (both branches) saw as many batches as the stem's
    batches = {k: int(v) for k, v in checkpoint['state_dict'].items() if k.endswith('num_batches_tracked')}
    assert any('.adv_bn.' in k for k in batches), name
    assert set(batches.values()) == {batches['conv1.1.num_batches_tracked']}, name
