"""CUDA tier: training steps on CUDA. Every registered method under bfloat16 and float16 autocast (with the loss
scaler) in channels_last memory against its fp32 step, gradient checkpointing against the unchecked step, a compiled
step that stops recompiling, and the ``--plan`` budget. The same checks run on the CPU in ``test_device_checks.py``."""
import pytest
import torch

import device_checks as checks
from timm_advnorm.task import get_task_class, list_tasks

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures('no_tf32')]

CUDA = torch.device('cuda')
LOSS_SCALED = [method for method in list_tasks() if get_task_class(method).supports_loss_scaling]


@pytest.mark.parametrize('method', list_tasks())
def test_a_bfloat16_channels_last_step_is_close_to_the_fp32_step(method):
    checks.check_low_precision_step(CUDA, method, torch.bfloat16, channels_last=True)


@pytest.mark.parametrize('method', LOSS_SCALED)
def test_a_float16_channels_last_step_with_the_loss_scaler_is_close_to_the_fp32_step(method):
    checks.check_low_precision_step(CUDA, method, torch.float16, channels_last=True)


@pytest.mark.usefixtures('cudnn_deterministic')
@pytest.mark.parametrize('method', checks.CHECKPOINTED_METHODS)
def test_a_checkpointed_step_equals_the_unchecked_one(method):
    """The recomputed forward runs the kernels of the first one: with deterministic cuDNN the two steps agree to fp32
    rounding (`checks.TOLERANCE`: 1e-4 relative, room for the recomputation's own summation order)."""
    checks.check_checkpointed_step(CUDA, method)


@pytest.mark.usefixtures('cudnn_deterministic')
def test_a_checkpointed_bfloat16_channels_last_mbn_step_equals_the_unchecked_one():
    """As above under bfloat16 autocast: 3e-2 relative, bfloat16's 8-bit mantissa (`checks.TOLERANCE`)."""
    checks.check_checkpointed_step(CUDA, 'mbn', torch.bfloat16, channels_last=True)


def test_a_compiled_mbn_step_does_not_recompile_after_its_first_steps():
    checks.check_compiled_step_does_not_recompile(CUDA, 'inductor')


def test_the_plan_budget_measures_a_step_on_cuda():
    budget = checks.check_plan_budget(CUDA)
    assert budget.peak_memory_bytes <= torch.cuda.max_memory_allocated(CUDA)
