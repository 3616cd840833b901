"""The CUDA tier's checks (`device_checks`) run on the CPU: their references, tolerances and comparisons are exercised
in every CI run, so the checks the GPU runs cannot rot while no GPU runs them."""
import pytest
import torch

import device_checks as checks
from ports import free_port
from timm_advnorm.task import get_task_class, list_tasks

pytestmark = pytest.mark.usefixtures('one_thread')

CPU = torch.device('cpu')
LOW_PRECISION = [(method, dtype) for method in list_tasks() for dtype in (torch.bfloat16, torch.float16)
                 if dtype == torch.bfloat16 or get_task_class(method).supports_loss_scaling]


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
@pytest.mark.parametrize('channels_last', [False, True], ids=['nchw', 'channels_last'])
@pytest.mark.parametrize('name', checks.ROUTES)
def test_mixture_bn_routes_against_float64_batch_norms(name, channels_last, dtype):
    checks.check_mixture_bn_route(CPU, name, channels_last, dtype)


@pytest.mark.parametrize('name', checks.ROUTES)
def test_mixture_bn_routes_in_eval_mode(name):
    checks.check_mixture_bn_route(CPU, name, channels_last=False, dtype=torch.float32, training=False)


@pytest.mark.parametrize('method, dtype', LOW_PRECISION, ids=[f'{m}-{str(d)[6:]}' for m, d in LOW_PRECISION])
def test_a_low_precision_step_is_close_to_the_fp32_step(method, dtype):
    checks.check_low_precision_step(CPU, method, dtype, channels_last=True)


def test_a_float16_step_the_scaler_does_not_unscale_is_far_from_the_fp32_step(monkeypatch):
    """The control of the comparison above: Fast AdvProp back-propagates inside its step, outside the loss scaler
    (the training command refuses float16 for it); let through, its float16 gradients are off by the scale."""
    monkeypatch.setattr(get_task_class('fast_advprop'), 'supports_loss_scaling', True)
    with pytest.raises(AssertionError, match='gradient'):
        checks.check_low_precision_step(CPU, 'fast_advprop', torch.float16, channels_last=False)


@pytest.mark.parametrize('method', checks.CHECKPOINTED_METHODS)
def test_a_checkpointed_step_equals_the_unchecked_one(method):
    checks.check_checkpointed_step(CPU, method)


@pytest.mark.parametrize('channels_last', [False, True], ids=['nchw', 'channels_last'])
def test_bn_folding(channels_last):
    checks.check_bn_folding(CPU, channels_last)


@pytest.mark.parametrize('name', checks.ATTACKS)
def test_an_fp32_attack_matches_its_float64_run(name, two_branches):
    checks.check_attack_matches_the_cpu(CPU, name, two_branches)


def test_attack_memory_stays_flat():
    checks.check_attack_memory_stays_flat(CPU)


def test_sync_mixture_bn_keeps_routes_in_a_one_process_group():
    checks.check_sync_mixture_bn_keeps_routes(CPU, 'gloo', free_port())


def test_a_compiled_training_step_does_not_recompile():
    """Compiled by the ``eager`` backend: the guards and recompilations are dynamo's whatever the backend."""
    checks.check_compiled_step_does_not_recompile(CPU, 'eager')


def test_the_plan_budget():
    checks.check_plan_budget(CPU)


def test_sanity_checks_pass():
    checks.check_sanity_checks_pass(CPU, *checks.honest_digits_classifier())
