"""Shared fixtures: the rendered digits dataset, offline defaults, one-thread set-up, tiny training loops; the
``cuda`` marker's skip where no CUDA device is present."""
import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.pop('HF_TOKEN', None)  # uploads are faked in the tests; a real token must never be used
if 'TIMM_ADVNORM_DECODE_CACHE' not in os.environ:  # the tests' decode checks never fill the user's cache
    os.environ['TIMM_ADVNORM_DECODE_CACHE'] = tempfile.mkdtemp(prefix='timm-advnorm-decode-check-')
    atexit.register(shutil.rmtree, os.environ['TIMM_ADVNORM_DECODE_CACHE'], ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Skip every test marked ``cuda`` where torch sees no CUDA device, so that a CPU run reports them as skipped."""
    cuda_tests = [item for item in items if item.get_closest_marker('cuda') is not None]
    if not cuda_tests:
        return
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason='needs a CUDA device: torch.cuda.is_available() is false')
    for item in cuda_tests:
        item.add_marker(skip)


@pytest.fixture(scope='module')
def no_tf32():
    """Run a module with full fp32 matrix products and convolutions on CUDA, restoring torch's settings after it.

    TF32 (on by default for cuDNN convolutions) rounds their inputs to 10 bits: a speed setting of the user's, under
    which no fp32 result matches its float64 reference to fp32 rounding.
    """
    import torch
    settings = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = settings


@pytest.fixture
def cudnn_deterministic():
    """Deterministic cuDNN kernels (no autotuned algorithm choice, no atomic-add reductions) for a test comparing two
    CUDA computations that should agree to fp32 rounding, restoring torch's settings after it.

    Without it, two runs of one convolution's backward may pick different algorithms or sum in another order, and
    the comparison would measure cuDNN's nondeterminism instead of the code under test.
    """
    import torch
    settings = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = settings


@pytest.fixture(autouse=True)
def _own_log_handlers():
    """The commands set up logging on first use; handlers bound to a test's captured stream must not outlive it."""
    handlers = list(logging.root.handlers)
    yield
    logging.root.handlers[:] = handlers


@pytest.fixture(scope='session')
def digits_dir(tmp_path_factory) -> Path:
    """Folder to pass as ``--data-dir`` for ``--dataset digits``; rendered once per session."""
    from timm_advnorm.data import resolve_dataset
    data_dir = tmp_path_factory.mktemp('digits')
    resolve_dataset('digits', str(data_dir), img_size=32)
    return data_dir


@pytest.fixture(scope='session')
def mnist5k_dir(tmp_path_factory) -> Path:
    """Folder to pass as ``--data-dir`` for ``--dataset mnist5k`` (28 px); rendered once per session."""
    from timm_advnorm.data import resolve_dataset
    data_dir = tmp_path_factory.mktemp('mnist5k')
    resolve_dataset('mnist5k', str(data_dir), img_size=28)
    return data_dir


@pytest.fixture(scope='session')
def pattern_images():
    """Factory of a synthetic, separable image task: ``pattern_images(n, seed, num_classes=, size=, space=)``.

    Returns normalized images (n, 3, size, size) and labels (n,): a fixed ±3% sign pattern per class plus 10% pixel
    noise, so that small L∞ budgets flip many of them. The same `seed` always gives the same samples.
    """
    import torch

    def make(n: int, seed: int, *, num_classes: int, size: int, space):
        patterns = torch.randn(num_classes, 3, size, size, generator=torch.Generator().manual_seed(1234)).sign()
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, num_classes, (n,), generator=g)
        pixels = (0.5 + 0.03 * patterns[y] + 0.1 * torch.randn(n, 3, size, size, generator=g)).clamp(0, 1)
        return space.from_pixels(pixels), y
    return make


@pytest.fixture(scope='session')
def fit_classifier():
    """``fit_classifier(model, data, iterations)``: SGD on 512 samples of ``data(n, seed)``, then eval mode.

    Checks the model learned (> 90% accuracy on 64 held-out samples), so attack tests never run on a random model.
    """
    import torch
    import torch.nn.functional as F

    def fit(model, data, iterations: int):
        x, y = data(512, seed=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for i in range(iterations):
            rows = slice(64 * (i % 8), 64 * (i % 8 + 1))
            optimizer.zero_grad()
            F.cross_entropy(model(x[rows]), y[rows]).backward()
            optimizer.step()
        model.eval()
        x_test, y_test = data(64, seed=1)
        with torch.no_grad():
            assert (model(x_test).argmax(1) == y_test).float().mean() > 0.9, 'the fixture model must have learned'
        return model
    return fit


@pytest.fixture(scope='module')
def one_thread():
    """Run a test module (its module-scoped set-up included) on one intra-op thread.

    Tiny models run fastest that way, and unaffected by a busy machine. Use it with
    ``pytestmark = pytest.mark.usefixtures('one_thread')`` and request it from module-scoped fixtures that train.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='session')
def train_briefly():
    """``train_briefly(model, x, y, steps)``: SGD (lr 0.1, momentum 0.9) on seeded random batches of 64 samples.

    A few seconds of it make a small model accurate enough, with honest gradients, for attacks to have something
    to attack: a random-init model leaves no correctly classified sample.
    """
    import torch
    import torch.nn.functional as F

    def train(model, x, y, steps: int) -> None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        generator = torch.Generator().manual_seed(0)
        for _ in range(steps):
            index = torch.randint(0, len(x), (64,), generator=generator)
            loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return train


@pytest.fixture(scope='session')
def two_branch_mbn():
    """``two_branch_mbn(seed=0, num_classes=5)``: a tiny mixture-BN model (``test_mbn_resnet``, eval mode) whose two
    branches compute different functions (random affine parameters and statistics in both BNs of every layer)."""
    import timm
    import torch

    import timm_advnorm  # noqa: F401  (registers test_mbn_resnet)
    from timm_advnorm.layers import mixture_bn_modules

    def make(seed: int = 0, num_classes: int = 5):
        torch.manual_seed(seed)
        model = timm.create_model('test_mbn_resnet', num_classes=num_classes)
        with torch.no_grad():
            for module in mixture_bn_modules(model):
                for bn in (module, module.adv_bn):
                    bn.weight.uniform_(0.5, 1.5)
                    bn.bias.normal_(0, 0.2)
                    bn.running_mean.normal_(0, 0.2)
                    bn.running_var.uniform_(0.5, 2.0)
        return model.eval()
    return make


@pytest.fixture(scope='module')
def two_branches(two_branch_mbn):
    """The two-branch model the attack checks of `device_checks` compare across devices, with its class count."""
    from device_checks import NUM_CLASSES

    return two_branch_mbn(num_classes=NUM_CLASSES)


@pytest.fixture(scope='session')
def untrained_resnet_and_images():
    """An untrained ``test_resnet`` (10 classes, eval mode, seed 0) and 16 seeded random 32 px images in its input
    space with random labels: an evaluation whose attacks fool some images and not others."""
    import timm
    import torch

    from timm_advnorm.attacks import InputSpace
    torch.manual_seed(0)
    model = timm.create_model('test_resnet', num_classes=10).eval()
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(16, 3, 32, 32, generator=generator)
    return model, (InputSpace().from_pixels(x), torch.randint(0, 10, (16,), generator=generator))
