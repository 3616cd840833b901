"""timm's own ``train.py`` logic trains a mixture-BN model under ``torchrun``: plain DDP, two CPU processes."""
import os
import subprocess
import sys
from pathlib import Path

from ports import free_port

TESTS = Path(__file__).resolve().parent


def test_plain_ddp_trains_mbn_model_for_several_steps(tmp_path):
    """Every parameter gets a gradient in a clean-route step, so DDP without ``find_unused_parameters`` finishes its
    reduction every step and the ranks stay identical (the idle adversarial branch used to stop step two)."""
    output = tmp_path / 'sums'
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'CUDA_VISIBLE_DEVICES': '', 'HF_HUB_OFFLINE': '1'}
    command = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1', '--nproc-per-node', '2',
               '--rdzv-backend', 'c10d', '--rdzv-endpoint', f'127.0.0.1:{free_port()}',
               str(TESTS / 'timm_train_ddp_worker.py'), str(output)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    sums = [float((tmp_path / f'sums.rank{rank}').read_text()) for rank in (0, 1)]
    assert sums[0] == sums[1]
