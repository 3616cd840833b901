"""Checks of the device-dependent code paths, each a function of the device it runs on.

The CUDA tier (``tests/test_cuda_*.py``, marker ``cuda``) calls every check on ``cuda``; ``tests/test_device_checks.py``
calls the same checks on the CPU, so that their logic (references, tolerances, what they compare) runs in every CI run
and a check cannot rot while no GPU runs it. The references are independent of the code under test where one exists:
plain float64 batch norms on the CPU for the mixture-BN routes, the float64 CPU run of an attack from the same random
start, the fp32 step for a low-precision one, the unchecked step for a checkpointed one.
"""
import copy
from typing import Callable, Dict, List, Optional, Tuple

import timm
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import timm_advnorm  # noqa: F401  (registers the models and the methods)
from timm_advnorm.attacks import InputSpace, apgd, attack_context, create_attack, pgd, square
from timm_advnorm.attacks.fold_bn import fold_batchnorm
from timm_advnorm.attacks.registry import attack_config
from timm_advnorm.commands.train import parse_args, train_options
from timm_advnorm.eval.plan.stage_plan import build_plan
from timm_advnorm.eval.plan.stages import EvalContext
from timm_advnorm.eval.plan.variants import Variant
from timm_advnorm.eval.protocols.protocol import AttackSpec, Protocol
from timm_advnorm.eval.results.sanity import run_sanity_checks, summarize_checks
from timm_advnorm.eval.run.data import IndexedSubset
from timm_advnorm.eval.run.evaluator import RobustEvaluator
from timm_advnorm.eval.run.records import ResultTable
from timm_advnorm.layers import (
    MixtureBatchNorm2d, convert_sync_mixture_bn, mixture_bn_modules, route, set_grad_checkpointing)
from timm_advnorm.task import AdversarialClassificationTask
from timm_advnorm.train.budget import RunBudget, plan_budget
from timm_advnorm.train.build import _loss_scaler, create_run_task
from timm_advnorm.train.loop import LossScaler, train_one_epoch

Tensors = Dict[str, torch.Tensor]

NUM_CLASSES = 10
IMG_SIZE = 32
SPACE = InputSpace()
#: Mixture-BN routes and their arguments: ``split`` with unequal blocks.
ROUTES = {'clean': {}, 'adv': {}, 'split': {'n_clean': 2}, 'interleaved': {}, 'mix': {'gamma': 0.3}}
#: Relative tolerance of a result computed in each dtype against its float64 reference (bfloat16 keeps 8 bits).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
#: Options of every method's training step: PGD-1 at ε=1 (one small attack step: rounding that flips the sign of an
#: input gradient near zero moves the adversarial images, and with them the step, little), NoFrost*'s augmentation
#: with a small untrained network.
METHOD_OPTIONS = ('--attack-eps', '1', '--attack-steps', '1', '--attack-step', '1', '--attack-clean-start-prob', '0',
                  '--seed', '0', '--deepaugment-net', 'cae', '--deepaugment-random-weights')
#: Tiny models a method may train, tried in order: the first it accepts is used.
MODELS = ('test_mbn_resnet', 'test_nfr_resnet')
#: How far a low-precision step's whole gradient may turn from the fp32 step's: the least cosine similarity per dtype.
#: Tiny models at 32 px normalize few values per channel, which makes their gradients sensitive to rounding: measured
#: on the CPU, bfloat16 steps keep a cosine above 0.94 and float16 steps above 0.98.
MIN_GRADIENT_COSINE = {torch.bfloat16: 0.9, torch.float16: 0.97}


def assert_close_scaled(got: torch.Tensor, expected: torch.Tensor, tolerance: float, msg: str = '') -> None:
    """`got` equals `expected` (on the CPU, in float64) within `tolerance` relative to each value and to the largest
    magnitude of `expected`: low-precision rounding is relative to the values a kernel sums, not to each result."""
    expected = expected.detach().double().cpu()
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(got.detach().double().cpu(), expected, rtol=tolerance,
                               atol=tolerance * max(scale, 1e-3), msg=msg)


# Mixture-BN routes ---------------------------------------------------------------------------------------------------

def _mixture_bn_layer(channels: int) -> MixtureBatchNorm2d:
    """A mixture-BN layer whose two branches differ in every affine parameter and running statistic."""
    generator = torch.Generator().manual_seed(0)
    layer = MixtureBatchNorm2d(channels)
    with torch.no_grad():
        for bn in (layer, layer.adv_bn):
            bn.weight.copy_(torch.rand(channels, generator=generator) + 0.5)
            bn.bias.copy_(torch.randn(channels, generator=generator))
            bn.running_mean.copy_(torch.randn(channels, generator=generator))
            bn.running_var.copy_(torch.rand(channels, generator=generator) + 0.5)
    return layer


def _reference_route(layer: MixtureBatchNorm2d, name: str, kwargs: dict
                     ) -> Tuple[Callable[[torch.Tensor], torch.Tensor], Tuple[nn.BatchNorm2d, nn.BatchNorm2d]]:
    """`name`'s definition on two plain float64 CPU batch norms holding `layer`'s branches (in `layer`'s mode), and
    those two batch norms."""
    clean = nn.BatchNorm2d(layer.num_features).double()
    clean.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith('adv_bn.')})
    adv = copy.deepcopy(layer.adv_bn).double()
    clean.train(layer.training)
    adv.train(layer.training)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if name == 'clean':
            return clean(x)
        if name == 'adv':
            return adv(x)
        if name == 'split':
            return torch.cat([clean(x[:kwargs['n_clean']]), adv(x[kwargs['n_clean']:])])
        if name == 'interleaved':
            return torch.stack([clean(x[0::2]), adv(x[1::2])], dim=1).flatten(0, 1)
        return torch.lerp(clean(x), adv(x), kwargs['gamma'])  # mix

    return forward, (clean, adv)


def check_mixture_bn_route(device: torch.device, name: str, channels_last: bool, dtype: torch.dtype,
                           training: bool = True) -> None:
    """One mixture-BN layer on route `name` on `device` equals the route's definition on float64 CPU batch norms:
    output, input gradient, both branches' affine gradients and running statistics.

    `dtype` is the input's (``torch.bfloat16``: what a bfloat16 autocast convolution hands the layer, run under
    autocast); the reference runs on the same, rounded input in float64.
    """
    channels = 8
    layer = _mixture_bn_layer(channels).train(training)
    reference, reference_branches = _reference_route(layer, name, ROUTES[name])
    layer.to(device)
    generator = torch.Generator().manual_seed(1)
    x = (torch.randn(6, channels, 5, 5, generator=generator) * 3 + 1).to(dtype)
    upstream = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x_device = x.to(device, memory_format=memory_format, copy=True).requires_grad_(True)
    with route(layer, name, **ROUTES[name]), torch.autocast(device.type, dtype=dtype,
                                                             enabled=dtype != torch.float32):
        out = layer(x_device)
    (out.double() * upstream.to(device)).sum().backward()
    x_reference = x.double().requires_grad_(True)
    expected = reference(x_reference)
    (expected * upstream).sum().backward()

    tolerance = TOLERANCE[dtype]
    assert out.dtype == dtype and out.device.type == device.type
    assert_close_scaled(out, expected, tolerance, 'output')
    assert_close_scaled(x_device.grad, x_reference.grad, tolerance, 'input gradient')
    for ours, theirs in zip((layer, layer.adv_bn), reference_branches):
        for param in ('weight', 'bias'):
            their_grad = getattr(theirs, param).grad
            our_grad = getattr(ours, param).grad
            if their_grad is None:  # a branch no row reached: none, or the idle branch's exact zero
                assert our_grad is None or not our_grad.any(), param
            else:
                assert_close_scaled(our_grad, their_grad, tolerance, f'{param} gradient')
        for buffer in ('running_mean', 'running_var'):
            assert_close_scaled(getattr(ours, buffer), getattr(theirs, buffer), tolerance, buffer)
        assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked)


# Training steps ------------------------------------------------------------------------------------------------------

def seeded_model(name: str, device: torch.device, checkpointing: bool) -> nn.Module:
    """A fresh, seeded tiny model on `device`; a mixture-BN model's adversarial branch differs from its clean one."""
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=NUM_CLASSES)
    with torch.no_grad():
        for module in mixture_bn_modules(model):
            module.adv_bn.weight.uniform_(0.5, 1.5)
            module.adv_bn.running_var.uniform_(0.5, 2.0)
    model.to(device)
    return set_grad_checkpointing(model) if checkpointing else model


def build_task(method: str, device: torch.device, amp_dtype: Optional[torch.dtype] = None,
               checkpointing: bool = False) -> Tuple[AdversarialClassificationTask, nn.Module]:
    """`method`'s task as the training command builds it from its options, on the first of `MODELS` it accepts, and
    that model."""
    args, _ = parse_args(['--method', method, *METHOD_OPTIONS])
    args.rank, args.distributed = 0, False
    for name in MODELS:
        model = seeded_model(name, device, checkpointing)
        try:
            task = create_run_task(train_options(args), model, SPACE, num_classes=NUM_CLASSES, amp_dtype=amp_dtype,
                                   device=device, verbose=False)
        except ValueError:  # a model the method refuses (NoFrost: one with batch norm)
            continue
        return task, model
    raise ValueError(f'--method {method} accepts none of {MODELS}.')


def _batch(rows: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = SPACE.from_pixels(torch.rand(rows, 3, IMG_SIZE, IMG_SIZE, generator=generator))
    return x.to(device), torch.randint(0, NUM_CLASSES, (rows,), generator=generator).to(device)


def training_step(method: str, device: torch.device, amp_dtype: Optional[torch.dtype] = None,
                  channels_last: bool = False, checkpointing: bool = False, batch_size: int = 32
                  ) -> Tuple[Tensors, Tensors]:
    """One step of the training loop (`train_one_epoch` on one batch) of `method` on `device`, with the float16 loss
    scaler under float16 autocast; every parameter's gradient (unscaled) and every buffer after it.

    The optimizer's learning rate is 0, so the step leaves the weights as they were and only its gradients and running
    statistics differ between settings.
    """
    task, model = build_task(method, device, amp_dtype, checkpointing)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    batch = _batch(int(round(batch_size * task.batch_scale)), device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = _loss_scaler(task, amp_dtype, device)
    torch.manual_seed(1)  # the methods' own draws (TDA views, DeepAugment) start alike
    train_one_epoch(0, task, [batch], optimizer, device, amp_dtype=amp_dtype, channels_last=channels_last,
                    log_interval=0, loss_scaler=scaler)
    if scaler is not None:
        assert scaler.get_scale() == LossScaler(device.type).get_scale(), 'the float16 step overflowed: it was skipped'
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return grads, {name: b.detach().clone() for name, b in model.named_buffers()}


def _flat(tensors: Tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().flatten() for t in tensors.values()])


def check_low_precision_step(device: torch.device, method: str, amp_dtype: torch.dtype, channels_last: bool) -> None:
    """A step under `amp_dtype` autocast (float16: with the loss scaler), in channels_last memory if asked, has finite
    gradients for the parameters the fp32 step trains, close to the fp32 NCHW step's.

    Close means the whole gradient points the same way (`MIN_GRADIENT_COSINE`) and has the same norm within 10%:
    rounding moves the attack's sign steps on near-zero input gradients and the small per-channel sums of a tiny model,
    so single values may differ by more than rounding while the step stays the same step. A float16 step whose
    gradients the scaler did not unscale (Fast AdvProp's, which the training command refuses) is off by far more.
    """
    expected, expected_buffers = training_step(method, device)
    grads, buffers = training_step(method, device, amp_dtype, channels_last)
    assert grads.keys() == expected.keys()
    for name, grad in grads.items():
        assert grad.dtype == expected[name].dtype and torch.isfinite(grad).all(), name
    for name, buffer in buffers.items():
        assert not buffer.is_floating_point() or torch.isfinite(buffer).all(), name
    got, want = _flat(grads), _flat(expected)
    cosine = float(F.cosine_similarity(got, want, dim=0))
    assert cosine > MIN_GRADIENT_COSINE[amp_dtype], f'{method}: gradient cosine {cosine:.4f} to the fp32 step'
    ratio = float(got.norm() / want.norm())
    assert abs(ratio - 1) < 0.1, f'{method}: gradient norm {ratio:.4f} times the fp32 step\'s'


#: Methods whose checkpointed step is checked: plain BN, the interleaved and split routes, normalizer-free.
CHECKPOINTED_METHODS = ('vanilla', 'madry', 'mbn', 'fast_advprop', 'nofrost')


def check_checkpointed_step(device: torch.device, method: str, amp_dtype: Optional[torch.dtype] = None,
                            channels_last: bool = False) -> None:
    """A step of `method` with gradient checkpointing equals the unchecked step: every gradient and every buffer
    (both branches' running statistics and batch counts included)."""
    expected = training_step(method, device, amp_dtype, channels_last)
    got = training_step(method, device, amp_dtype, channels_last, checkpointing=True)
    tolerance = TOLERANCE[amp_dtype or torch.float32]
    for kind, want, have in zip(('gradient', 'buffer'), expected, got):
        assert want.keys() == have.keys(), kind
        for name in want:
            assert_close_scaled(have[name], want[name], tolerance, f'{kind} {name}')


# BN folding ----------------------------------------------------------------------------------------------------------

def check_bn_folding(device: torch.device, channels_last: bool) -> None:
    """A mixture-BN model with BN folded into its convolutions computes what it computes unfolded, on every route a
    fold supports, and its folded weights take the layout `fold_batchnorm` promises on `device`: channels_last on the
    CPU, each convolution's own elsewhere."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = seeded_model('test_mbn_resnet', device, False).eval().to(memory_format=memory_format)
    x = _batch(4, device)[0].contiguous(memory_format=memory_format)
    outputs = {}
    for name in ('clean', 'adv', 'mix'):
        with route(model, name, **ROUTES[name]), torch.no_grad():
            folded = fold_batchnorm(model)
            assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules()), name
            outputs[name] = model(x)
            assert_close_scaled(folded(x), outputs[name], TOLERANCE[torch.float32], name)
    assert not torch.allclose(outputs['clean'], outputs['adv']), 'the branches must compute different functions'
    folded_layout = device.type == 'cpu' or channels_last
    for module in folded.modules():
        if isinstance(module, nn.Conv2d) and module.weight.shape[-1] > 1:  # a 1x1 kernel is contiguous either way
            assert module.weight.is_contiguous(memory_format=torch.channels_last) == folded_layout


# Attacks -------------------------------------------------------------------------------------------------------------

#: Attacks compared across devices: white-box with a fixed and with an adaptive step, and black-box (whose random
#: search needs a larger budget to fool a random-weight model in a few queries).
ATTACKS: Dict[str, Callable[..., torch.Tensor]] = {
    'pgd': lambda model, x, y, generator: pgd(model, x, y, space=SPACE, eps=8.0, step=2.0, steps=5,
                                              generator=generator),
    'apgd': lambda model, x, y, generator: apgd(model, x, y, space=SPACE, eps=8.0, steps=10, generator=generator),
    'square': lambda model, x, y, generator: square(model, x, y, space=SPACE, eps=32.0, n_queries=40,
                                                    generator=generator),
}


def _attacked(model: nn.Module, name: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Attack `name` on `model` from the random start of a seeded CPU generator, as the evaluation calls it."""
    with attack_context(model):
        return ATTACKS[name](model, x, y, torch.Generator().manual_seed(0))


def check_attack_matches_the_cpu(device: torch.device, name: str, model: nn.Module) -> None:
    """Attack `name` on `device` (fp32) ends where it ends on the CPU in float64 from the same random start, within
    rounding: a step's sign may flip on an input gradient within rounding of zero, which moves single pixels by a step,
    so at most 2% of the values may differ by more than rounding and at most one sample may change its outcome.

    Args:
        model: An eval-mode model on the CPU whose branches and predictions are not trivial (`two_branch_mbn`).
    """
    x = _batch(16, torch.device('cpu'))[0]
    with torch.no_grad():
        y = model(x).argmax(1)  # every sample starts correctly classified: every sample is attacked
    reference_model = copy.deepcopy(model).double()
    expected = _attacked(reference_model, name, x.double(), y)
    got = _attacked(copy.deepcopy(model).to(device), name, x.to(device), y.to(device))
    assert got.device.type == device.type and got.dtype == torch.float32
    got = got.double().cpu()
    assert (got - x).abs().amax() > 0, 'the attack moved nothing'
    moved = ((got - expected).abs() > 1e-4).double().mean().item()
    assert moved <= 0.02, f'{name}: {moved:.1%} of the values differ from the CPU result by more than rounding'
    with torch.no_grad():
        fooled = reference_model(got).argmax(1) != y
        fooled_reference = reference_model(expected).argmax(1) != y
    assert fooled_reference.any(), 'the attack must fool some samples for the comparison to mean something'
    assert int((fooled != fooled_reference).sum()) <= 1


def attack_peak_bytes(device: torch.device, steps: int) -> int:
    """Peak memory of one PGD evaluation (best iterate) of `steps` iterations, above what was in use before it.

    On CUDA, ``torch.cuda.max_memory_allocated``; on the CPU, the tensor storage alive at once (`LiveTensorBytes`,
    exact where resident memory is not). A first, unmeasured call makes the one-time allocations.
    """
    model = seeded_model('test_mbn_resnet', device, False).eval()
    x, y = _batch(16, device)
    attack = create_attack('pgd', space=SPACE, eps=8.0, step=1.0, steps=steps, seed=0)
    attack(model, x, y)
    if device.type != 'cuda':
        from test_attack_memory import LiveTensorBytes
        with LiveTensorBytes() as live:
            attack(model, x, y)
        return live.peak
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    attack(model, x, y)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def check_attack_memory_stays_flat(device: torch.device) -> None:
    """PGD-20's peak is PGD-2's, within half an iterate: an attack keeping one graph or iterate per iteration would
    add eighteen."""
    iterate_bytes = 16 * 3 * IMG_SIZE * IMG_SIZE * 4
    few, many = attack_peak_bytes(device, 2), attack_peak_bytes(device, 20)
    assert few > iterate_bytes, 'the measure must see the attack'
    assert many <= few + iterate_bytes // 2, f'PGD-20 peaks at {many} bytes, PGD-2 at {few}'


# Distributed mixture BN ----------------------------------------------------------------------------------------------

def check_sync_mixture_bn_keeps_routes(device: torch.device, backend: str, port: int) -> None:
    """In a one-process group of `backend`, a model converted to `SyncMixtureBatchNorm2d` computes what the mixture-BN
    model computes on every route, and updates the same branch's running statistics."""
    dist.init_process_group(backend, init_method=f'tcp://127.0.0.1:{port}', rank=0, world_size=1)
    try:
        model = seeded_model('test_mbn_resnet', device, False).train()
        synced = convert_sync_mixture_bn(copy.deepcopy(model))
        assert type(synced.bn1).__name__.startswith('SyncMixture')
        x = _batch(6, device)[0]
        for name, kwargs in ROUTES.items():
            with route(model, name, **kwargs), route(synced, name, **kwargs):
                assert_close_scaled(synced(x), model(x), TOLERANCE[torch.float32], name)
            for (key, want), have in zip(model.state_dict().items(), synced.state_dict().values()):
                assert_close_scaled(have, want, TOLERANCE[torch.float32], f'{name}: {key}')
    finally:
        dist.destroy_process_group()


# torch.compile -------------------------------------------------------------------------------------------------------

def compilations_per_step(device: torch.device, backend: str, steps: int = 4) -> List[int]:
    """Graphs compiled so far after each of `steps` training steps of a ``torch.compile``d `mbn` task, compiled as the
    training command compiles it (``task.compile``) with `backend`."""
    import torch._dynamo
    from torch._dynamo.backends.registry import lookup_backend

    compiled = [0]

    def counting_backend(graph: torch.fx.GraphModule, example_inputs: list):
        compiled[0] += 1
        return lookup_backend(backend)(graph, example_inputs)

    torch._dynamo.reset()
    task, model = build_task('mbn', device)
    task.compile(backend=counting_backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    counts = []
    for step in range(steps):
        batch = _batch(8, device)
        train_one_epoch(step, task, [batch], optimizer, device, log_interval=0)
        counts.append(compiled[0])
    torch._dynamo.reset()
    return counts


def check_compiled_step_does_not_recompile(device: torch.device, backend: str) -> None:
    """A compiled `mbn` training step compiles during its first two steps (the second sees the optimizer's state and
    counted batches), then never again."""
    counts = compilations_per_step(device, backend)
    assert counts[0] > 0, 'nothing was compiled'
    assert counts[1:] == [counts[1]] * (len(counts) - 1), f'graphs compiled after each step: {counts}'


# Budget --------------------------------------------------------------------------------------------------------------

def check_plan_budget(device: torch.device) -> RunBudget:
    """``--plan``'s budget of an `mbn` run measured on `device`: a timed step, its peak memory (at least the gradients
    and the batch), and the FLOPs a step counts, between its training passes and the papers' cost model."""
    task, model = build_task('mbn', device)
    batch = _batch(8, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    budget = plan_budget(task, optimizer, batch, train_images=64, epochs=2, model_name='test_mbn_resnet')
    assert budget.device == device.type
    assert budget.step_seconds is not None and budget.step_seconds > 0
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert budget.peak_memory_bytes is not None and budget.peak_memory_bytes > gradient_bytes + batch[0].nbytes
    model_flops = budget.passes_per_image * budget.flops_per_pass
    assert 2 * budget.flops_per_pass < budget.step_flops_per_image < model_flops
    return budget


# Evaluation sanity checks --------------------------------------------------------------------------------------------

def honest_digits_classifier() -> Tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small CNN trained on the CPU for a few seconds on scikit-learn's digits (3x16x16, normalized as `SPACE`):
    about 90% accurate, with honest gradients; in eval mode, with 48 validation images and their labels."""
    from sklearn.datasets import load_digits
    bunch = load_digits()
    pixels = F.interpolate(torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0, size=16,
                           mode='bilinear', align_corners=False).expand(-1, 3, -1, -1)
    x, y = SPACE.from_pixels(pixels.contiguous()), torch.tensor(bunch.target)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, NUM_CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):
        rows = torch.randint(0, 1500, (64,), generator=generator)
        optimizer.zero_grad()
        F.cross_entropy(model(x[rows]), y[rows]).backward()
        optimizer.step()
    return model.eval(), x[1500:1548], y[1500:1548]


def check_sanity_checks_pass(device: torch.device, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """A robust evaluation (PGD-5 at ε=8) of an honestly trained `model` on `device` passes every sanity check: the
    huge-budget, more-iterations and black-box probes run on that device too.

    Args:
        model: An eval-mode classifier of 10 classes on the CPU, trained with honest gradients.
        x, y: Its validation images (3x16x16, normalized as `SPACE`) and labels.
    """
    num_samples, input_size = len(x), (3, 16, 16)
    dataset = IndexedSubset(TensorDataset(x, y), range(num_samples), range(num_samples))
    protocol = Protocol('device', 'device', 'device', (AttackSpec('pgd', attack_config('pgd', steps=5), 8.0),))
    plan = build_plan(protocol, sanity_samples=num_samples, sanity_steps=5, sanity_queries=400)
    evaluator = RobustEvaluator(copy.deepcopy(model).to(device), [Variant('model')], plan.stages,
                                EvalContext(SPACE, input_size), NUM_CLASSES, num_samples, seed=0, device=device)
    checks = run_sanity_checks(ResultTable(evaluator.run(DataLoader(dataset, batch_size=24))), 'model', plan,
                               NUM_CLASSES, input_size)
    assert summarize_checks(checks)['passed'], {c.name: c.message for c in checks if c.status != 'pass'}
