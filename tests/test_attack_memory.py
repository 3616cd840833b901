"""An attack's memory does not grow with its iteration count: PGD-20 peaks where PGD-2 does.

An attack that kept each iteration's graph (its activations) or its iterates alive would need memory linear in its
iterations: at ImageNet scale, PGD-30 training would not fit. The measure is `LiveTensorBytes`: the most bytes of
tensor storage made during a call and alive at the same time. A `TorchDispatchMode` sees every tensor an ATen
operation makes, in the forward and in the backward (which the autograd engine runs on the calling thread for CPU
tensors), and puts a finalizer on its storage; torch keeps a storage's Python object for as long as the storage
lives, so the finalizer runs exactly when the memory is freed, and CPython frees at once. The count is exact and the
same at every run: no allocator caching (resident memory), no tolerance for noise, and it sees the tensors that
``tracemalloc`` cannot. Its limit: memory that no tensor holds (a library's workspace) is not counted.

The margin is half an iterate: keeping a single iterate per iteration would add eighteen. A control checks that the
measure does see an attack loop that keeps its iterates, or its graphs.
"""
import weakref
from typing import Any, Callable, Dict, List

import pytest
import timm
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import timm_advnorm  # noqa: F401  (registers the models)
from timm_advnorm.attacks import InputSpace, attack_context, create_attack, create_training_attack
from timm_advnorm.attacks.core import cross_entropy_per_sample, input_gradient
from timm_advnorm.task import create_task

pytestmark = pytest.mark.usefixtures('one_thread')

NUM_CLASSES = 10
FEW, MANY = 2, 20
#: Attacks with an iteration count beyond PGD, with the options each needs at a budget of 8/255.
EVAL_ATTACKS = {'apgd-ce': {}, 'apgd-t': dict(n_target_classes=2), 'bim-linf': dict(step=2.0),
                'bim-l2': dict(eps=128.0, step=32.0), 'mifgsm': dict(step=2.0), 'cw-linf': dict(step=2.0),
                'fab-t': dict(n_target_classes=2)}


class LiveTensorBytes(TorchDispatchMode):
    """Within the ``with`` block: the peak (`peak`) of the bytes of tensor storage made by torch operations and alive
    at once (see the module docstring). Storage an operation shares with its inputs (views, in-place results) is not
    new; storage made before the block (weights, inputs) is not counted."""

    def __init__(self):
        super().__init__()
        self._live: Dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._track(tensor.untyped_storage(), inputs)
        return out

    def _track(self, storage: torch.UntypedStorage, inputs: set) -> None:
        key = id(storage)
        if key in inputs or key in self._live:
            return
        self._live[key] = storage.nbytes()
        self.current += self._live[key]
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key)


def _peak_bytes(fn: Callable[[], Any]) -> int:
    with LiveTensorBytes() as live:
        fn()
    return live.peak


@pytest.fixture(scope='module')
def model() -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model('test_resnet', num_classes=NUM_CLASSES).eval()


@pytest.fixture(scope='module')
def batch(model):
    generator = torch.Generator().manual_seed(0)
    space = InputSpace.from_model(model)
    x = space.from_pixels(torch.rand(16, 3, 32, 32, generator=generator))
    return x, torch.randint(0, NUM_CLASSES, (16,), generator=generator)


def _iterate_bytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


def _assert_flat(peaks: Dict[int, int], x: torch.Tensor) -> None:
    assert peaks[MANY] <= peaks[FEW] + _iterate_bytes(x) // 2, \
        f'PGD-{MANY} peaks at {peaks[MANY]:,} bytes, PGD-{FEW} at {peaks[FEW]:,}: the loop keeps memory per iteration'


@pytest.mark.parametrize('options', [dict(bn_stats='running'), dict(bn_stats='batch')], ids=['folded_bn', 'batch_bn'])
def test_the_training_pgd_peaks_alike_at_2_and_20_iterations(model, batch, options):
    """The methods' attack (last iterate, random start), on BN folded into the convolutions (running statistics) and
    on batch statistics (the unfolded model)."""
    x, y = batch
    space = InputSpace.from_model(model)

    def attack(steps: int) -> Callable[[], Any]:
        pgd = create_training_attack('pgd', space=space, eps=8.0, step=2.0, steps=steps, norm='linf', targeted=True,
                                     random_start=True, clean_start_prob=0.0, best_iterate=False, seed=0, **options)
        return lambda: pgd(model, x, y)

    _assert_flat({k: _peak_bytes(attack(k)) for k in (FEW, MANY)}, x)


@pytest.mark.parametrize('name', ['pgd', *EVAL_ATTACKS])
def test_an_evaluation_attack_peaks_alike_at_2_and_20_iterations(model, batch, name):
    """PGD keeping the best iterate, and the other iterative attacks of the evaluation protocols."""
    x, y = batch
    options = dict(best_iterate=True, step=2.0) if name == 'pgd' else EVAL_ATTACKS[name]

    def attack(steps: int) -> Callable[[], Any]:
        made = create_attack(name, space=InputSpace.from_model(model), steps=steps, seed=0, **{'eps': 8.0, **options})
        return lambda: made(model, x, y)

    _assert_flat({k: _peak_bytes(attack(k)) for k in (FEW, MANY)}, x)


def test_fast_advprops_attack_inside_the_training_pass_peaks_alike_at_2_and_20_iterations(batch):
    """Fast AdvProp's iterations are training passes reusing their gradients: each one's graph goes with its
    backward."""
    x, y = batch

    def step(steps: int) -> Callable[[], Any]:
        torch.manual_seed(0)
        task = create_task('fast_advprop', timm.create_model('test_mbn_resnet', num_classes=NUM_CLASSES),
                           space=InputSpace(), eps=1.0, steps=steps).train()
        return lambda: task(x, y)['loss'].backward()

    _assert_flat({k: _peak_bytes(step(k)) for k in (FEW, MANY)}, x)


def _leaky_pgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, keep: str) -> torch.Tensor:
    """A PGD loop with the bug the tests guard against: it keeps every iterate, or every iteration's graph."""
    kept: List[torch.Tensor] = []
    x_adv = x
    with attack_context(model):
        for _ in range(steps):
            if keep == 'iterates':
                grad, _, _ = input_gradient(model, x_adv, y, cross_entropy_per_sample)
                kept.append(x_adv)
            else:
                x_adv = x_adv.detach().requires_grad_(True)
                loss = cross_entropy_per_sample(model(x_adv), y).sum()
                grad, = torch.autograd.grad(loss, x_adv, retain_graph=True)
                kept.append(loss)
            x_adv = (x_adv + 0.01 * grad.sign()).detach()
    return x_adv


@pytest.mark.parametrize('keep', ['iterates', 'graphs'])
def test_the_measure_sees_a_loop_that_keeps_its_iterates_or_graphs(model, batch, keep):
    x, y = batch
    peaks = {k: _peak_bytes(lambda k=k: _leaky_pgd(model, x, y, k, keep)) for k in (FEW, MANY)}
    assert peaks[MANY] - peaks[FEW] >= (MANY - FEW) * _iterate_bytes(x)


def test_the_measure_counts_what_is_alive_and_frees_what_dies():
    """Exact bytes: a new tensor counts, a view of it does not, a freed one leaves the count."""
    with LiveTensorBytes() as live:
        a = torch.zeros(1000)
        b = a.view(10, 100)
        c = torch.ones(500)
        del b, c
    assert (live.peak, live.current) == (6000, 4000)
    del a
    assert live.current == 0
