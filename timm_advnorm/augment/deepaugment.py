"""DeepAugment on the fly: images through a pretrained image-to-image network with distorted weights and activations.

DeepAugment (Hendrycks et al., *The Many Faces of Robustness*, ICCV 2021, §4) makes new training images by feeding
each image to a pretrained CAE or EDSR network whose weights and activations are randomly distorted. NoFrost*
(Wang et al., *Removing Batch Normalization Boosts Adversarial Training*, ICML 2022, §3.2) trains on such images next
to clean, adversarial and texture-debiased ones; its released code (amazon-science/normalizer-free-robust-training,
``deepaug/*_distort_imagenet.py``) generates them with the original scripts of hendrycks/imagenet-r
(``DeepAugment/CAE_distort_imagenet.py``, ``DeepAugment/EDSR_distort_imagenet.py``), whose weight distortions
(``get_weights``) are reproduced here, each with its constants; the activation distortions are in
`timm_advnorm.augment.deepaugment_nets`.

`DeepAugment` draws new weight and activation distortions at every call (a batch shares them); the original draws
activation distortions per image and new weights for 5% of the images (`generate_deepaugment_folder` of
`timm_advnorm.augment.generate` draws both per image). The networks need the original pretrained weights, read from
a file the user gives; nothing is downloaded.
"""
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..messages import counted_names, shape_text
from ..weights.checkpoint import check_finite_weights, load_weights_file, strip_wrapper_prefixes
from .deepaugment_nets import CAE, EDSR, DeepAugmentRng

__all__ = ['NETS', 'DeepAugment', 'build_net', 'load_deepaugment_weights', 'perturb_weights']

#: The networks of the original: the compressive autoencoder and the ×4 EDSR super-resolution baseline.
NETS = ('cae', 'edsr')
#: Where the original scripts expect each network's weights (hendrycks/imagenet-r, DeepAugment/).
ORIGINAL_WEIGHT_FILES = {'cae': 'CAE_Weights/model_final.state', 'edsr': 'EDSR_Weights/edsr_baseline_x4.pt'}
# The EDSR mean shifts are constants (EDSR-PyTorch's MeanShift), rebuilt when a weights file leaves them out.
_EDSR_CONSTANT_KEYS = ('sub_mean.weight', 'sub_mean.bias', 'add_mean.weight', 'add_mean.bias')

StateDict = Dict[str, torch.Tensor]


def _check_net(net: str) -> str:
    if net not in NETS:
        raise ValueError(f'Unknown DeepAugment network {net!r}; choose from {", ".join(NETS)}.')
    return net


def build_net(net: str) -> nn.Module:
    """An untrained `CAE` (``'cae'``) or `EDSR` (``'edsr'``), in eval mode, without gradients."""
    module = CAE() if _check_net(net) == 'cae' else EDSR()
    return module.eval().requires_grad_(False)


def load_deepaugment_weights(net: str, path: Union[str, Path]) -> StateDict:
    """The pretrained state dict of `net` from `path` (a torch.save or safetensors file), checked against the
    architecture.

    The original files are ``CAE_Weights/model_final.state`` and ``EDSR_Weights/edsr_baseline_x4.pt`` of
    hendrycks/imagenet-r (the latter is EDSR-PyTorch's ``edsr_baseline_x4``); ``module.`` prefixes are dropped.

    Raises:
        FileNotFoundError: No file at `path`.
        ValueError: Unknown `net`, a damaged file, weights of another network (naming missing, unexpected or
            mis-shaped keys) or weights holding NaN or inf; one line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f'DeepAugment {_check_net(net).upper()} weights not found: {path} (the original '
                                f'{ORIGINAL_WEIGHT_FILES[net]} of hendrycks/imagenet-r)')
    expected = build_net(net).state_dict()
    loaded = load_weights_file(path)
    if not (isinstance(loaded, dict) and loaded and all(isinstance(v, torch.Tensor) for v in loaded.values())):
        raise ValueError(f'{path}: not a state dict (a mapping of names to tensors) of the DeepAugment {net.upper()}')
    state = strip_wrapper_prefixes(loaded)
    optional = _EDSR_CONSTANT_KEYS if net == 'edsr' else ()
    missing = [k for k in expected if k not in state and k not in optional]
    unexpected = [k for k in state if k not in expected]
    mis_shaped = [f'{k} {shape_text(state[k].shape)} vs {shape_text(v.shape)}'
                  for k, v in expected.items() if k in state and state[k].shape != v.shape]
    problems = [counted_names(keys, f'{label} key') for label, keys in
                (('missing', missing), ('unexpected', unexpected), ('mis-shaped', mis_shaped)) if keys]
    if problems:
        raise ValueError(f'{path} does not hold the DeepAugment {net.upper()} weights: {"; ".join(problems)}')
    check_finite_weights(state, str(path))
    return {k: state[k].float() if k in state else v for k, v in expected.items()}


# ----------------------------------------------------------------------------------------------------------------
# CAE weight distortions: CAE_distort_imagenet.py, get_weights(). Layers are numbered 0-20 in state dict order.

_CAE_LAYERS = ('e_conv_1.1', 'e_conv_2.1', *(f'e_block_{b}.{i}' for b in (1, 2, 3) for i in (1, 4)), 'e_conv_3.0',
               'd_up_conv_1.0', 'd_up_conv_1.3', *(f'd_block_{b}.{i}' for b in (1, 2, 3) for i in (1, 4)),
               'd_up_conv_2.0', 'd_up_conv_2.3', 'd_up_conv_3.0', 'd_up_conv_3.3')
# OPTION_LAYER_MAPPING of the original (NUM_LAYERS = 21): option 0 distorts a decoder block (layers 11-15), option 3
# layers 10-13, the others the code layer and the first decoder layers (8-13).
_CAE_OPTION_LAYERS = {0: range(11, 16), 3: range(10, 14)}
_CAE_DEFAULT_LAYERS = range(8, 14)


def _scaled_noise_factor(shape: Sequence[int], rng: DeepAugmentRng, spread: float) -> torch.Tensor:
    """``1 + 2·u·spread·r``: u ~ U(0, 1) once, r ~ U(0, 1) per weight.

    The original writes ``1 + 2 * u * (spread * torch.rand_like(w - 1))``: the ``- 1`` sits inside ``rand_like``'s
    argument, so the factor lies in [1, 1 + 2·spread), as kept here.
    """
    u = rng.uniform()
    return 1 + 2 * u * spread * rng.rand(shape)


def _cae_reverse_filters(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 0: reverse the order of layer i's filters (weight and bias along dim 0).

    The original also flips layer j's weight twice (its ``bias_j`` names the weight), which leaves it unchanged.
    """
    for key in (f'{i}.weight', f'{i}.bias'):
        state[key] = torch.flip(state[key], (0,))


def _cae_per_filter(state: StateDict, i: str, draws: int, rng: DeepAugmentRng,
                    edit: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """`edit` the weight and bias of `draws` filters of layer i drawn with replacement, once per draw."""
    weight, bias = state[f'{i}.weight'].clone(), state[f'{i}.bias'].clone()
    for _ in range(draws):
        k = rng.randint(0, weight.shape[0] - 1)
        weight[k], bias[k] = edit(weight[k]), edit(bias[k])
    state[f'{i}.weight'], state[f'{i}.bias'] = weight, bias


def _cae_negate_filters(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 1: negate 12 filters of layer i (a filter drawn twice is negated back)."""
    _cae_per_filter(state, i, 12, rng, torch.neg)


def _cae_zero_filters(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 2: zero 25 filters of layer i."""
    _cae_per_filter(state, i, 25, rng, torch.zeros_like)


def _cae_neg_gelu_filters(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 3: replace 25 filters w of layer i by -GELU(w) (again for a filter drawn again)."""
    _cae_per_filter(state, i, 25, rng, lambda w: -F.gelu(w))


def _cae_scale_weights(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 4: multiply the weights of layers i and j by ``1 + 2·u·4·r`` each (twice if i is j)."""
    for layer in (i, j):
        key = f'{layer}.weight'
        state[key] = state[key] * _scaled_noise_factor(state[key].shape, rng, 4.0)


def _cae_mask_weights(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 5: multiply layer i's weights by a random {0, 1} mask or, with probability 0.5, a {-1, 1} one."""
    key = f'{i}.weight'
    binary = rng.uniform() < 0.5
    mask = torch.round(rng.rand(state[key].shape))
    state[key] = state[key] * (mask if binary else mask * 2 - 1)


def _cae_rotate_kernels(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 6: rotate layer i's kernels by 90°, 180° or 270° (``rot90``, k from 1-3, spatial dims)."""
    key = f'{i}.weight'
    state[key] = torch.rot90(state[key], k=rng.randint(1, 3), dims=(2, 3))


def _cae_negate_fifth(state: StateDict, i: str, j: str, rng: DeepAugmentRng) -> None:
    """Option 7: negate the weights of the distinct filters among ``filters // 5`` draws (the original's list is
    called ``to_zero`` but is negated)."""
    key = f'{i}.weight'
    filters = state[key].shape[0]
    chosen = sorted({rng.randint(0, filters - 1) for _ in range(filters // 5)})
    weight = state[key].clone()
    weight[chosen] = -weight[chosen]
    state[key] = weight


# The original samples ``random.sample(range(NUM_DISTORTIONS), 1)`` with NUM_DISTORTIONS = 8, so its option 8 (keep
# each kernel's largest value) is never drawn and is left out here.
_CAE_WEIGHT_DISTORTIONS = (_cae_reverse_filters, _cae_negate_filters, _cae_zero_filters, _cae_neg_gelu_filters,
                           _cae_scale_weights, _cae_mask_weights, _cae_rotate_kernels, _cae_negate_fifth)


def _perturb_cae(state: StateDict, rng: DeepAugmentRng) -> None:
    """One weight distortion of the CAE, on layers i and j drawn from the option's layer range."""
    option = rng.randint(0, len(_CAE_WEIGHT_DISTORTIONS) - 1)
    layers = _CAE_OPTION_LAYERS.get(option, _CAE_DEFAULT_LAYERS)
    i, j = _CAE_LAYERS[rng.choice(layers)], _CAE_LAYERS[rng.choice(layers)]
    _CAE_WEIGHT_DISTORTIONS[option](state, i, j, rng)


# ----------------------------------------------------------------------------------------------------------------
# EDSR weight distortions: EDSR_distort_imagenet.py, get_weights(). ``body.i.body.0`` and ``body.i.body.2`` are the
# two convolutions of residual block i (0-15).

_EVERY_THIRD = (0, 3, 6, 9)  # np.arange(0, 10, 3)
_FIRST_BLOCKS = tuple(range(15))  # list(range(15)): blocks 0-14, the last block (15) is never drawn
_LAPLACIAN = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
_EDGE = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, 8.0, -1.0], [-1.0, -1.0, -1.0]])


def _conv(block: int, index: int, kind: str = 'weight') -> str:
    return f'body.{block}.body.{index}.{kind}'


def _edsr_reverse_filters(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 0: reverse the filter order of both convolutions (weights and biases) of a block from 0, 3, 6, 9."""
    block = rng.choice(_EVERY_THIRD)
    for index in (0, 2):
        for kind in ('weight', 'bias'):
            state[_conv(block, index, kind)] = torch.flip(state[_conv(block, index, kind)], (0,))


def _edsr_negate_conv(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 1: negate the first convolution (weight and bias) of a block from 1, 4, 7 (``np.arange(1, 10, 3)``)."""
    block = rng.choice((1, 4, 7))
    for kind in ('weight', 'bias'):
        state[_conv(block, 0, kind)] = -state[_conv(block, 0, kind)]


def _edsr_zero_conv(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 2: zero the first convolution (weight and bias) of a block from 0, 3, 6, 9."""
    block = rng.choice(_EVERY_THIRD)
    for kind in ('weight', 'bias'):
        state[_conv(block, 0, kind)] = torch.zeros_like(state[_conv(block, 0, kind)])


def _edsr_neg_gelu(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 3: replace both convolution weights w of a block from 0, 3, 6, 9 by -GELU(w)."""
    block = rng.choice(_EVERY_THIRD)
    for index in (0, 2):
        state[_conv(block, index)] = -F.gelu(state[_conv(block, index)])


def _edsr_laplacian(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 4: multiply every 3×3 kernel of the first convolution of a block from 0, 3, 6, 9 elementwise by the
    Laplacian [[0, 1, 0], [1, -4, 1], [0, 1, 0]]."""
    key = _conv(rng.choice(_EVERY_THIRD), 0)
    state[key] = state[key] * _LAPLACIAN


def _edsr_edge(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 5: as option 4 with the kernel [[-1, -1, -1], [-1, 8, -1], [-1, -1, -1]]."""
    key = _conv(rng.choice(_EVERY_THIRD), 0)
    state[key] = state[key] * _EDGE


def _edsr_scale_second(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 6: multiply the second convolution's weights of a block from 0, 3, 6, 9 by ``1 + 2·u·2·r``."""
    key = _conv(rng.choice(_EVERY_THIRD), 2)
    state[key] = state[key] * _scaled_noise_factor(state[key].shape, rng, 2.0)


def _edsr_mirror_and_negate(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 7: mirror the first convolution's kernels horizontally and negate the second's (a block from 0, 3, 6,
    9)."""
    block = rng.choice(_EVERY_THIRD)
    state[_conv(block, 0)] = torch.flip(state[_conv(block, 0)], (-1,))
    state[_conv(block, 2)] = -state[_conv(block, 2)]


def _edsr_signed_shift_conv(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 8: convolve the first convolution's weight tensor (as 64 images of 64 channels, padding 1) with a
    kernel that, per input channel j, holds ±1 at a random one of the 3×3 positions for every output channel; a block
    from 1, 5, 9 (``np.arange(1, 13, 4)``)."""
    key = _conv(rng.choice((1, 5, 9)), 0)
    kernel = torch.zeros_like(state[key])
    for j in range(kernel.shape[0]):
        x, y = rng.randint(0, 2), rng.randint(0, 2)
        kernel[:, j, x, y] = rng.choice((1.0, -1.0))
    state[key] = F.conv2d(state[key], kernel, padding=1)


def _edsr_noise_conv(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 9: convolve the first convolution's weight tensor with the noise kernel ``(2·r·u - 1) / 6`` (r per
    element, u once, both U(0, 1)); a block from 0, 3, 6, 9."""
    key = _conv(rng.choice(_EVERY_THIRD), 0)
    r = rng.rand(state[key].shape)
    kernel = (2 * r * rng.uniform() - 1) / 6.0
    state[key] = F.conv2d(state[key], kernel, padding=1)


def _edsr_dirichlet_conv(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 10: convolve the second convolution's weight tensor with a kernel whose 3×3 entries per (out, in) pair
    are Dirichlet(0.1, ..., 0.1); a block from 1, 5, 9 (``np.arange(1, 12, 4)``)."""
    key = _conv(rng.choice((1, 5, 9)), 2)
    out_channels, in_channels = state[key].shape[:2]
    kernel = rng.dirichlet(0.1, 9, (out_channels, in_channels)).view(out_channels, in_channels, 3, 3)
    state[key] = F.conv2d(state[key], kernel, padding=1)


def _edsr_add_noise(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 11: add U(-0.5, 0.5) noise (``(rand - 0.5) * 1.0``) to the second convolution of a block from 0-14."""
    key = _conv(rng.choice(_FIRST_BLOCKS), 2)
    state[key] = state[key] + (rng.rand(state[key].shape) - 0.5) * 1.0


def _edsr_rotate(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 12: five times, rotate a convolution weight (block 0-14, first or second) by k·90° (k from 1-3) over
    the kernel's spatial dims or, with probability 0.5, over its (out, in) channel dims."""
    targets = [(rng.choice(_FIRST_BLOCKS), rng.choice((0, 2))) for _ in range(5)]
    for block, index in targets:
        k = rng.randint(1, 3)
        dims = (2, 3) if rng.randint(0, 1) == 0 else (0, 1)
        state[_conv(block, index)] = torch.rot90(state[_conv(block, index)], k=k, dims=dims)


def _edsr_sign_mask(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 13: five times, multiply a first convolution (block 0-14) by a random {-1, 1} mask."""
    for block in [rng.choice(_FIRST_BLOCKS) for _ in range(5)]:
        key = _conv(block, 0)
        state[key] = state[key] * (torch.round(rng.rand(state[key].shape)) * 2 - 1)


def _edsr_binary_mask(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 14: five times, multiply a first convolution (block 0-14) by a random {0, 1} mask."""
    for block in [rng.choice(_FIRST_BLOCKS) for _ in range(5)]:
        key = _conv(block, 0)
        state[key] = state[key] * torch.round(rng.rand(state[key].shape))


def _edsr_negate_filters(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 15: five times, negate the distinct filters among 32 draws from 0-63 of a first convolution (block
    0-14); the original's ``w[filters] *= -1`` negates a filter drawn twice once."""
    for block in [rng.choice(_FIRST_BLOCKS) for _ in range(5)]:
        key = _conv(block, 0)
        chosen = sorted({rng.randint(0, 63) for _ in range(32)})
        weight = state[key].clone()
        weight[chosen] = -weight[chosen]
        state[key] = weight


def _edsr_keep_max(state: StateDict, rng: DeepAugmentRng) -> None:
    """Option 16: five times, keep only the largest of the 9 values of every 3×3 kernel of a convolution (block
    0-14, first or second), zeroing the others (``torch.topk(k=1)``)."""
    for block, index in [(rng.choice(_FIRST_BLOCKS), rng.choice((0, 2))) for _ in range(5)]:
        key = _conv(block, index)
        flat = state[key].flatten(2)
        top = flat.topk(1, dim=2)
        state[key] = torch.zeros_like(flat).scatter(2, top.indices, top.values).view_as(state[key])


_EDSR_WEIGHT_DISTORTIONS = (
    _edsr_reverse_filters, _edsr_negate_conv, _edsr_zero_conv, _edsr_neg_gelu, _edsr_laplacian, _edsr_edge,
    _edsr_scale_second, _edsr_mirror_and_negate, _edsr_signed_shift_conv, _edsr_noise_conv, _edsr_dirichlet_conv,
    _edsr_add_noise, _edsr_rotate, _edsr_sign_mask, _edsr_binary_mask, _edsr_negate_filters, _edsr_keep_max)


def _perturb_edsr(state: StateDict, rng: DeepAugmentRng) -> None:
    """Three weight distortions of EDSR, drawn with replacement (``np.random.randint(0, 17, size=3)``), in order."""
    options = [rng.randint(0, len(_EDSR_WEIGHT_DISTORTIONS) - 1) for _ in range(3)]
    for option in options:
        _EDSR_WEIGHT_DISTORTIONS[option](state, rng)


def perturb_weights(net: str, state: StateDict, rng: DeepAugmentRng) -> StateDict:
    """A randomly distorted copy of `net`'s state dict `state` (on the CPU), as the original's ``get_weights``.

    CAE: one of 8 distortions (``random.sample(range(8), 1)``); EDSR: three of 17. `state` is left unchanged.
    """
    distorted = dict(state)
    (_perturb_cae if _check_net(net) == 'cae' else _perturb_edsr)(distorted, rng)
    return distorted


# ----------------------------------------------------------------------------------------------------------------


class DeepAugment:
    """Distort batches of images with a DeepAugment network, new weight and activation distortions at every call.

    Calling it maps images in [0, 1], (B, 3, H, W), to distorted images of the same shape, dtype and device, in
    [0, 1]. The CAE runs at the batch's size (padded to a multiple of 4); EDSR, a ×4 super-resolution network that
    the original feeds 128-px images to make 512-px ones, gets the batch downscaled 4× (bilinear, antialiased), and
    its output is resized to the batch's size where that is not a multiple of 4. `distort` runs a network at its
    native scale, as the original scripts do. A plain object rather than an `nn.Module`, so that its networks'
    weights never join a model's parameters; `to` moves it.

    Args:
        net: ``'cae'`` or ``'edsr'``.
        weights: The original pretrained weights file (`load_deepaugment_weights`).
        seed: Seed of all distortions; None draws one from torch's global RNG at the first call, so that DataLoader
            workers (seeded per worker by torch) distort differently and reproducibly.
        device: Where the network runs.
        allow_random_weights: Accept ``weights=None`` and run an untrained network (initialized from `seed`): for
            tests only, since an untrained network's output is noise, not DeepAugment.

    Raises:
        ValueError: Unknown `net`, no `weights` without `allow_random_weights`, or weights of another network.
        FileNotFoundError: No file at `weights`.
    """

    def __init__(self, net: str = 'cae', weights: Union[str, Path, None] = None, *, seed: Optional[int] = None,
                 device: Union[str, torch.device] = 'cpu', allow_random_weights: bool = False):
        self.net_name = _check_net(net)
        if weights is not None:
            self._clean = load_deepaugment_weights(net, weights)
        elif allow_random_weights:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed if seed is not None else int(torch.randint(2 ** 62, (1,))))
                self._clean = build_net(net).state_dict()
        else:
            raise ValueError(f'DeepAugment {net.upper()} needs the pretrained weights: pass weights= (the original '
                             f'{ORIGINAL_WEIGHT_FILES[net]}); allow_random_weights=True runs an untrained network, '
                             f'for tests only')
        self.net = build_net(net).to(device)
        self._seed = seed
        self._rng: Optional[DeepAugmentRng] = None

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def to(self, device: Union[str, torch.device]) -> 'DeepAugment':
        """Run the network on `device`; returns self."""
        self.net.to(device)
        return self

    def manual_seed(self, seed: int) -> 'DeepAugment':
        """Restart the distortions from `seed`; returns self."""
        self._seed, self._rng = seed, None
        return self

    @property
    def rng(self) -> DeepAugmentRng:
        if self._rng is None:
            seed = self._seed if self._seed is not None else int(torch.randint(2 ** 62, (1,)))
            self._rng = DeepAugmentRng(seed)
        return self._rng

    @torch.no_grad()
    def distort(self, images: torch.Tensor) -> torch.Tensor:
        """The network with freshly distorted weights and activations at its native scale, in float32 on its device.

        CAE: (B, 3, H, W) → (B, 3, H, W); EDSR: (B, 3, H, W) → (B, 3, 4H, 4W). Inputs and outputs in [0, 1]. The
        CAE input is padded (edge values) to a multiple of 4 and its output cropped back, where the original's output
        loses the rows and columns beyond a multiple of 4.
        """
        _check_images(images)
        x = images.to(self.device, torch.float32)
        self.net.load_state_dict(perturb_weights(self.net_name, self._clean, self.rng))
        if self.net_name == 'edsr':  # EDSR works in [0, 255] (rgb_range=255), clamped to it by the original
            return self.net(x * 255.0, self.rng).clamp(0.0, 255.0) / 255.0
        height, width = x.shape[-2:]
        padded = F.pad(x, (0, -width % 4, 0, -height % 4), mode='replicate')  # the CAE halves the size twice
        return self.net(padded, self.rng)[..., :height, :width].clamp(0.0, 1.0)

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Distorted `images` (B, 3, H, W) in [0, 1]: same shape, dtype and device."""
        _check_images(images)
        height, width = images.shape[-2:]
        x = images
        if self.net_name == 'edsr':
            small = (max(1, round(height / 4)), max(1, round(width / 4)))
            x = F.interpolate(images.to(self.device, torch.float32), size=small, mode='bilinear', antialias=True,
                              align_corners=False).clamp(0.0, 1.0)
        out = self.distort(x)
        if out.shape[-2:] != (height, width):
            out = F.interpolate(out, size=(height, width), mode='bilinear', antialias=True, align_corners=False)
        return out.clamp(0.0, 1.0).to(images.device, images.dtype)


def _check_images(images: torch.Tensor) -> None:
    if not (isinstance(images, torch.Tensor) and images.dim() == 4 and images.shape[1] == 3
            and images.is_floating_point()):
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f'DeepAugment takes a float batch of RGB images (B, 3, H, W) in [0, 1], got {shape}')
