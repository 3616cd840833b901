"""The image-to-image networks of DeepAugment and the activation distortions they run with.

DeepAugment (Hendrycks et al., *The Many Faces of Robustness*, ICCV 2021, §4) passes images through a pretrained
image-to-image network whose weights and activations are randomly distorted. The original code
(github.com/hendrycks/imagenet-r, folder ``DeepAugment``) uses two networks, reimplemented here with the same layer
names and shapes so that its pretrained state dicts load unchanged:

* `CAE`: the compressive autoencoder of Theis et al. (2017), ``CAE_Model/cae_32x32x32_zero_pad_bin.py``;
* `EDSR`: the ×4 EDSR baseline super-resolution network of Lim et al. (2017), class ``EDSR`` of
  ``EDSR_distort_imagenet.py`` built from EDSR-PyTorch's ``common`` blocks (github.com/sanghyun-son/EDSR-PyTorch,
  ``src/model/common.py``).

Their ``forward`` applies the activation distortions of the original, each documented where it is drawn; the weight
distortions live in `timm_advnorm.augment.deepaugment`. Where the released code behaves differently from what its
comments say (a tuple swap that copies, a loop that overwrites its result), the behaviour is kept, since it is what
produced the published DeepAugment images that NoFrost* trains on, and the docstring says so.
"""
from typing import Dict, List, Sequence, Tuple, TypeVar

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['CAE', 'EDSR', 'DeepAugmentRng']

_T = TypeVar('_T')


class DeepAugmentRng:
    """Every random draw of DeepAugment, from one seed, so that a seed fixes the distortions exactly.

    Choices, scalars and weight-sized noise come from a CPU `torch.Generator`; activation-sized noise comes from a
    generator on the activations' device (seeded from the same seed), so that large masks are not made on the CPU.
    The original draws from Python's `random`, NumPy's global state and torch's; the distributions are the same.

    Args:
        seed: Seed of all draws.
    """

    def __init__(self, seed: int):
        self.cpu = torch.Generator().manual_seed(seed)
        self._device_seed = int(torch.randint(2 ** 62, (1,), generator=self.cpu))
        self._device_generators: Dict[torch.device, torch.Generator] = {}

    def randint(self, low: int, high: int) -> int:
        """An integer in [low, high], both included (as Python's ``random.randint``)."""
        return int(torch.randint(low, high + 1, (1,), generator=self.cpu))

    def choice(self, options: Sequence[_T]) -> _T:
        """One of `options`, uniformly."""
        return options[self.randint(0, len(options) - 1)]

    def uniform(self) -> float:
        """A float in [0, 1)."""
        return float(torch.rand((), generator=self.cpu))

    def rand(self, shape: Sequence[int]) -> torch.Tensor:
        """CPU noise in [0, 1) of `shape` (weight-sized)."""
        return torch.rand(tuple(shape), generator=self.cpu)

    def permutation(self, n: int) -> torch.Tensor:
        """A random permutation of ``range(n)``."""
        return torch.randperm(n, generator=self.cpu)

    def dirichlet(self, alpha: float, categories: int, shape: Tuple[int, ...]) -> torch.Tensor:
        """Samples of a symmetric Dirichlet(`alpha`) over `categories`, of shape ``shape + (categories,)``.

        torch's Dirichlet takes no generator; NumPy's, seeded from this generator, stays reproducible.
        """
        numpy_rng = np.random.default_rng(self.randint(0, 2 ** 62))
        return torch.from_numpy(numpy_rng.dirichlet([alpha] * categories, shape)).float()

    def noise(self, shape: Sequence[int], device: torch.device) -> torch.Tensor:
        """Activation-sized noise in [0, 1) on `device`."""
        device = torch.device(device)
        if device.type not in ('cpu', 'cuda'):  # no device generator: draw on the CPU
            return self.noise(shape, torch.device('cpu')).to(device)
        if device not in self._device_generators:
            self._device_generators[device] = torch.Generator(device=device).manual_seed(self._device_seed)
        return torch.rand(tuple(shape), generator=self._device_generators[device], device=device)


# ----------------------------------------------------------------------------------------------------------------
# CAE


def _zero_padded_conv(in_ch: int, out_ch: int, kernel: int, stride: int, pad: Tuple[int, int, int, int]) -> List:
    """``[ZeroPad2d, Conv2d]``: the CAE pads explicitly (asymmetrically for its stride-2 convolutions)."""
    return [nn.ZeroPad2d(pad), nn.Conv2d(in_ch, out_ch, kernel, stride=stride)]


def _cae_res_block() -> nn.Sequential:
    """Two 128-channel 3×3 convolutions with a LeakyReLU between (state dict indices 1 and 4)."""
    return nn.Sequential(*_zero_padded_conv(128, 128, 3, 1, (1, 1, 1, 1)), nn.LeakyReLU(),
                         *_zero_padded_conv(128, 128, 3, 1, (1, 1, 1, 1)))


def _cae_up_conv(in_ch: int, mid_ch: int, out_ch: int) -> nn.Sequential:
    """An unpadded 3×3 conv, LeakyReLU, zero padding 1 and a 2× transposed conv (state dict indices 0 and 3)."""
    return nn.Sequential(nn.Conv2d(in_ch, mid_ch, 3), nn.LeakyReLU(), nn.ZeroPad2d((1, 1, 1, 1)),
                         nn.ConvTranspose2d(mid_ch, out_ch, 2, stride=2))


class CAE(nn.Module):
    """The compressive autoencoder of DeepAugment: 3×H×W → 32×H/4×W/4 bits → 3×H×W (H, W multiples of 4).

    Layer names and shapes follow ``CAE_Model/cae_32x32x32_zero_pad_bin.py`` of hendrycks/imagenet-r (weights
    ``CAE_Weights/model_final.state``). The input is an image in [0, 1]; the output is the decoder's tanh, which
    DeepAugment clamps to [0, 1].
    """

    def __init__(self):
        super().__init__()
        self.e_conv_1 = nn.Sequential(*_zero_padded_conv(3, 64, 5, 2, (1, 2, 1, 2)), nn.LeakyReLU())
        self.e_conv_2 = nn.Sequential(*_zero_padded_conv(64, 128, 5, 2, (1, 2, 1, 2)), nn.LeakyReLU())
        self.e_block_1 = _cae_res_block()
        self.e_block_2 = _cae_res_block()
        self.e_block_3 = _cae_res_block()
        self.e_conv_3 = nn.Sequential(nn.Conv2d(128, 32, 5, padding=2), nn.Tanh())
        self.d_up_conv_1 = _cae_up_conv(32, 64, 128)
        self.d_block_1 = _cae_res_block()
        self.d_block_2 = _cae_res_block()
        self.d_block_3 = _cae_res_block()
        self.d_up_conv_2 = _cae_up_conv(128, 32, 256)
        self.d_up_conv_3 = nn.Sequential(nn.Conv2d(256, 16, 3), nn.LeakyReLU(), nn.ReflectionPad2d((2, 2, 2, 2)),
                                         nn.Conv2d(16, 3, 3), nn.Tanh())

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The code before binarization, in [-1, 1] (tanh)."""
        x = self.e_conv_2(self.e_conv_1(x))
        for block in (self.e_block_1, self.e_block_2, self.e_block_3):
            x = block(x) + x
        return self.e_conv_3(x)

    def decode(self, bits: torch.Tensor) -> torch.Tensor:
        """The image decoded from a code in {0, 1} (or a scaled one), mapped to ±1 first."""
        x = self.d_up_conv_1(bits * 2.0 - 1.0)
        for block in (self.d_block_1, self.d_block_2, self.d_block_3):
            x = block(x) + x
        return self.d_up_conv_3(self.d_up_conv_2(x))

    def forward(self, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
        """Encode, distort the code with one of the original's nine activation distortions, binarize, decode.

        The original draws the distortion per call (``np.random.choice(range(9))`` in ``CAE.forward``); options 1-8
        act on the tanh code before the stochastic binarization, option 0 scales the bits after it.
        """
        code = self.encode(x)
        option = rng.randint(0, 8)
        if option != 0:
            code = _CAE_CODE_DISTORTIONS[option](code, rng)
        # Stochastic binarization of the CAE: +1 with probability (1 + code) / 2, else -1, as a {0, 1} code.
        bits = (rng.noise(code.shape, code.device) <= (1 + code) / 2).to(code.dtype)
        if option == 0:
            bits = _scale_bits(bits, rng)
        return self.decode(bits)


def _scale_bits(bits: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 0: bits × (3 + 2·u·2·r), u ~ U(0, 1) per call, r ~ U(0, 1) per element.

    The original writes ``3 + 2 * u * (2 * torch.rand_like(encoded - 1))``: the ``- 1`` sits inside ``rand_like``'s
    argument, so the factor lies in [3, 7), as kept here.
    """
    u = rng.uniform()
    return bits * (3 + 2 * u * 2 * rng.noise(bits.shape, bits.device))


def _spatial_mask(code: torch.Tensor, rng: DeepAugmentRng, threshold: float) -> torch.Tensor:
    """An H×W mask, shared by every image and channel, that is 1 where U(0, 1) > `threshold`."""
    return (rng.noise(code.shape[-2:], code.device) > threshold).to(code.dtype)


def _zero_positions(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 1: zero the code at ~20% of the spatial positions (``uniform_() > 0.2``)."""
    return code * _spatial_mask(code, rng, 0.2)


def _negate_positions(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 2: negate the code at ~10% of the spatial positions (``(uniform_() > 0.1) * 2 - 1``)."""
    return code * (_spatial_mask(code, rng, 0.1) * 2 - 1)


def _permute_channels(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 3: shuffle the first 10 code channels (``num_channels = 10``)."""
    order = torch.cat([rng.permutation(10), torch.arange(10, code.shape[1])]).to(code.device)
    return code[:, order]


def _flip_dims(rng: DeepAugmentRng) -> List[int]:
    """Two distinct dimensions of a (batch, H, W) channel slice, as the original's shuffled ``[0, 1, 2][:2]``."""
    return rng.permutation(3)[:2].tolist()


def _flip_some_channels(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 4: flip 5 randomly drawn channels (drawn with replacement: a channel drawn twice flips back).

    The flip is over two of the (batch, H, W) dimensions of the channel slice, so it may reorder the batch.
    """
    dims = _flip_dims(rng)
    code = code.clone()
    for _ in range(5):
        channel = rng.randint(0, code.shape[1] - 1)
        code[:, channel] = torch.flip(code[:, channel], dims)
    return code


def _flip_all_channels(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 5: flip every channel over two of its (batch, H, W) dimensions.

    The original swaps the two dimensions' order half-way through the channels, which flips the same way.
    """
    dims = [(0, 2, 3)[d] for d in _flip_dims(rng)]  # slice dimensions (batch, H, W) in the (batch, C, H, W) code
    return torch.flip(code, dims)


def _identity_kernel(channels: int, device: torch.device) -> torch.Tensor:
    """A channels×channels×3×3 convolution kernel that copies each channel (1 at its centre)."""
    kernel = torch.zeros(channels, channels, 3, 3, device=device)
    kernel[torch.arange(channels), torch.arange(channels), 1, 1] = 1
    return kernel


def _noisy_identity_conv(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 6: convolve with the identity 3×3 kernel plus U(-0.1, 0.1) noise (``(rand - 0.5) * 0.2``)."""
    kernel = _identity_kernel(code.shape[1], code.device)
    kernel = kernel + (rng.noise(kernel.shape, code.device) - 0.5) * 0.2
    return F.conv2d(code, kernel, padding=1)


def _mixing_conv(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 7: identity convolution where, with probability 0.5 per output channel, a random input channel at a
    random 3×3 position is added (``z[j, rand_layer, randint(-1, 1), randint(-1, 1)] = 1``; index -1 is 2)."""
    channels = code.shape[1]
    kernel = _identity_kernel(channels, code.device)
    for out_channel in range(channels):
        if rng.uniform() < 0.5:
            kernel[out_channel, rng.randint(0, channels - 1), rng.randint(-1, 1), rng.randint(-1, 1)] = 1
    return F.conv2d(code, kernel, padding=1)


def _shift_conv(code: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Option 8: shift every channel by one pixel or none in each direction: one shift for all channels, redrawn
    with probability 0.2 at each channel."""
    channels = code.shape[1]
    kernel = torch.zeros(channels, channels, 3, 3, device=code.device)
    shift = (rng.randint(0, 2), rng.randint(0, 2))
    for channel in range(channels):
        if rng.uniform() < 0.2:
            shift = (rng.randint(0, 2), rng.randint(0, 2))
        kernel[channel, channel, shift[0], shift[1]] = 1
    return F.conv2d(code, kernel, padding=1)


_CAE_CODE_DISTORTIONS = {1: _zero_positions, 2: _negate_positions, 3: _permute_channels, 4: _flip_some_channels,
                         5: _flip_all_channels, 6: _noisy_identity_conv, 7: _mixing_conv, 8: _shift_conv}


# ----------------------------------------------------------------------------------------------------------------
# EDSR


def _conv3x3(in_ch: int, out_ch: int) -> nn.Conv2d:
    """EDSR-PyTorch's ``default_conv``: a 3×3 convolution with bias and 'same' padding."""
    return nn.Conv2d(in_ch, out_ch, 3, padding=1)


class _MeanShift(nn.Conv2d):
    """EDSR-PyTorch's ``MeanShift``: a fixed 1×1 convolution adding `sign` × 255 × the DIV2K RGB mean
    (0.4488, 0.4371, 0.4040); a convolution so that its weights are in the state dict, as the original's are."""

    def __init__(self, sign: int, rgb_range: float = 255.0, rgb_mean: Tuple[float, ...] = (0.4488, 0.4371, 0.4040)):
        super().__init__(3, 3, 1)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1)
        self.bias.data = sign * rgb_range * torch.tensor(rgb_mean)
        self.requires_grad_(False)


class _ResBlock(nn.Module):
    """EDSR-PyTorch's ``ResBlock`` without batch norm: ``x + conv(relu(conv(x)))`` (res_scale 1)."""

    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(_conv3x3(channels, channels), nn.ReLU(True), _conv3x3(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + x


class EDSR(nn.Module):
    """The EDSR baseline ×4 super-resolution network of DeepAugment (16 residual blocks, 64 features).

    Layer names and shapes follow class ``EDSR`` of ``EDSR_distort_imagenet.py`` (hendrycks/imagenet-r; weights
    ``EDSR_Weights/edsr_baseline_x4.pt``, EDSR-PyTorch's released baseline). Input and output are images in
    [0, 255] (``rgb_range=255``); the output is 4× the input's size.
    """

    num_blocks = 16
    features = 64

    def __init__(self):
        super().__init__()
        self.sub_mean = _MeanShift(-1)
        self.add_mean = _MeanShift(+1)
        self.head = nn.Sequential(_conv3x3(3, self.features))
        self.body = nn.Sequential(*[_ResBlock(self.features) for _ in range(self.num_blocks)],
                                  _conv3x3(self.features, self.features))
        upsampler = nn.Sequential(_conv3x3(self.features, 4 * self.features), nn.PixelShuffle(2),
                                  _conv3x3(self.features, 4 * self.features), nn.PixelShuffle(2))
        self.tail = nn.Sequential(upsampler, _conv3x3(self.features, 3))

    def forward(self, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
        """Super-resolve with one "pre" and one "body" activation distortion drawn per call, as the original's
        ``__getitem__`` does (``random.randint(1, 4)`` and ``random.randint(1, 5)``; 4 and 5 distort nothing)."""
        pre, body = rng.randint(1, 4), rng.randint(1, 5)
        x = self.head(self.sub_mean(x))
        if pre in _EDSR_PRE_DISTORTIONS:
            x = _EDSR_PRE_DISTORTIONS[pre](x, rng)
        res = _EDSR_BODY_DISTORTIONS[body](self.body, x, rng) if body in _EDSR_BODY_DISTORTIONS else self.body(x)
        return self.add_mean(self.tail(res + x))


def _copy_channels(x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Pre-distortion 1: five times, channel c1 of the head's features becomes a copy of channel c2 (c1, c2 drawn
    from 0-63).

    The original means to swap them (``x[:, c1], x[:, c2] = x[:, c2], x[:, c1]``), but the right-hand side holds
    views, so c1 gets c2's values and c2 keeps its own: a copy, kept here.
    """
    x = x.clone()
    for _ in range(5):
        c1, c2 = rng.randint(0, 63), rng.randint(0, 63)
        x[:, c1] = x[:, c2]
    return x


def _drop_activations(x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Pre-distortion 2: zero ~5% of the activations (``round(rand + 0.45)`` is 0 for rand < 0.05)."""
    return x * torch.round(rng.noise(x.shape, x.device) + 0.45)


def _negate_activations(x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Pre-distortion 3: negate ~2.5% of the activations (``round(rand + 0.475) * 2 - 1``)."""
    return x * (torch.round(rng.noise(x.shape, x.device) + 0.475) * 2 - 1)


_EDSR_PRE_DISTORTIONS = {1: _copy_channels, 2: _drop_activations, 3: _negate_activations}


def _negate_midway(body: nn.Sequential, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Body distortion 1: negate the features after the first 5 residual blocks."""
    return body[5:](-body[:5](x))


def _activation_midway(body: nn.Sequential, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Body distortion 2: after the first 5 blocks, apply ReLU (``randint(0, 2) == 1``, p = 1/3) or else GELU."""
    activation = F.relu if rng.randint(0, 2) == 1 else F.gelu
    return body[5:](activation(body[:5](x)))


def _flip_midway(body: nn.Sequential, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Body distortion 3: after the first 5 blocks, flip over channels and height (p = 1/3) or else channels and
    width."""
    dims = [1, 2] if rng.randint(0, 2) == 1 else [1, 3]
    return body[5:](torch.flip(body[:5](x), dims))


def _skip_blocks(body: nn.Sequential, x: torch.Tensor, rng: DeepAugmentRng) -> torch.Tensor:
    """Body distortion 4: "skip" up to three modules drawn from 2-16 (``randint(2, 16)``, three draws).

    The original loops ``res = self.body[i](x)`` over the modules not skipped, each applied to the head's features
    ``x`` rather than to the previous result, so the outcome is the last module not skipped applied to ``x`` (usually
    the body's final convolution alone); that behaviour is kept.
    """
    skipped = {rng.randint(2, 16) for _ in range(3)}
    last = max(i for i in range(len(body)) if i not in skipped)
    return body[last](x)


_EDSR_BODY_DISTORTIONS = {1: _negate_midway, 2: _activation_midway, 3: _flip_midway, 4: _skip_blocks}
