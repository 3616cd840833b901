"""CUDA tier: mixture BN on CUDA. Every route against float64 batch norms on the CPU (NCHW and channels_last, fp32 and
bfloat16), BN folding, and `SyncMixtureBatchNorm2d` in a one-process NCCL group. The same checks run on the CPU in
``test_device_checks.py``."""
import pytest
import torch

import device_checks as checks
from ports import free_port

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures('no_tf32')]

CUDA = torch.device('cuda')


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
@pytest.mark.parametrize('channels_last', [False, True], ids=['nchw', 'channels_last'])
@pytest.mark.parametrize('name', checks.ROUTES)
def test_mixture_bn_routes_against_float64_batch_norms_on_the_cpu(name, channels_last, dtype):
    """cuDNN's batch norm runs every branch here (the fused split is CPU-only): forward, backward, statistics."""
    checks.check_mixture_bn_route(CUDA, name, channels_last, dtype)


@pytest.mark.parametrize('name', checks.ROUTES)
def test_mixture_bn_routes_in_eval_mode(name):
    checks.check_mixture_bn_route(CUDA, name, channels_last=False, dtype=torch.float32, training=False)


@pytest.mark.usefixtures('cudnn_deterministic')
@pytest.mark.parametrize('channels_last', [False, True], ids=['nchw', 'channels_last'])
def test_bn_folding_equals_the_unfolded_model_and_keeps_the_convolutions_layout(channels_last):
    """Folded and unfolded convolutions differ only by rounding the folded weights once: 1e-4 relative, fp32
    (`checks.TOLERANCE`), with deterministic cuDNN so that the algorithm choice cannot add its own difference."""
    checks.check_bn_folding(CUDA, channels_last)


def test_sync_mixture_bn_keeps_routes_in_a_one_process_nccl_group():
    checks.check_sync_mixture_bn_keeps_routes(CUDA, 'nccl', free_port())
