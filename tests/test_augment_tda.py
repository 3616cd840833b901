"""Texture-debiased augmentation: NoFrost's constants, output format, seeded reproducibility, ops that switch off."""
import numpy as np
import pytest
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torchvision import transforms

from timm_advnorm.augment import TDA_CROP_SCALE, blur_kernel_size, create_tda_transform

SIZE = 32
ALL_OFF = dict(scale=None, hflip=0.0, color_prob=0.0, blur_prob=0.0)


@pytest.fixture(scope='module')
def image() -> Image.Image:
    """A colourful 40×48 image with structure (gradients and a bright square), not symmetric."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:40, 0:48]
    pixels = np.stack([xx * 5, yy * 6, (xx + yy) * 3], axis=-1).astype(np.float64)
    pixels[8:20, 5:17] = (250, 40, 90)
    pixels += rng.normal(0, 8, pixels.shape)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def _seeded(transform, image, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return transform(image)


def _find(compose: transforms.Compose, kind: type) -> list:
    """The ops of type `kind` in `compose`, looking inside RandomApply and nested Compose."""
    found = []
    for op in compose.transforms:
        if isinstance(op, kind):
            found.append(op)
        if isinstance(op, (transforms.RandomApply, transforms.Compose)):
            found += _find(op, kind)
    return found


def test_defaults_are_nofrost_texture_debias_dataset():
    t = create_tda_transform(224)
    crop, = _find(t, transforms.RandomResizedCrop)
    assert crop.scale == TDA_CROP_SCALE == (0.64, 1.0) and crop.size == (224, 224)
    flip, = _find(t, transforms.RandomHorizontalFlip)
    assert flip.p == 0.5
    color = t.transforms[2]
    assert isinstance(color, transforms.RandomApply) and color.p == 0.5
    jitter_apply = color.transforms[0].transforms[0]
    assert jitter_apply.p == 0.8
    jitter, = _find(t, transforms.ColorJitter)
    assert jitter.brightness == jitter.contrast == jitter.saturation == pytest.approx((0.2, 1.8))
    assert jitter.hue == pytest.approx((-0.2, 0.2))
    gray, = _find(t, transforms.RandomGrayscale)
    assert gray.p == 0.2
    assert not _find(t, transforms.GaussianBlur)  # NoFrost's TDA has no blur
    assert blur_kernel_size(224) == 23 and blur_kernel_size(SIZE) == 3


def test_normalized_output_shape_dtype_and_range(image):
    out = _seeded(create_tda_transform(SIZE), image, 0)
    assert out.shape == (3, SIZE, SIZE) and out.dtype == torch.float32
    pixels = out * torch.tensor(IMAGENET_DEFAULT_STD).view(3, 1, 1) + torch.tensor(IMAGENET_DEFAULT_MEAN).view(3, 1, 1)
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5


@pytest.mark.parametrize('options', [dict(normalize=False), dict(use_prefetcher=True)])
def test_prefetcher_and_unnormalized_output_are_uint8_as_timm(image, options):
    out = _seeded(create_tda_transform((SIZE, SIZE + 8), **options), image, 0)
    assert out.shape == (3, SIZE, SIZE + 8) and out.dtype == torch.uint8


def test_same_seed_same_output_other_seed_other_output(image):
    t = create_tda_transform(SIZE, blur_prob=0.5)
    assert torch.equal(_seeded(t, image, 3), _seeded(t, image, 3))
    assert not torch.equal(_seeded(t, image, 3), _seeded(t, image, 4))


def test_output_differs_from_the_input(image):
    baseline = create_tda_transform(SIZE, **ALL_OFF)(image)
    t = create_tda_transform(SIZE)
    assert all(not torch.equal(_seeded(t, image, seed), baseline) for seed in range(4))


def test_with_every_op_off_it_is_resize_and_centre_crop(image):
    t = create_tda_transform(SIZE, **ALL_OFF)
    assert [type(op) for op in t.transforms[:2]] == [transforms.Resize, transforms.CenterCrop]
    assert not _find(t, transforms.RandomApply) and not _find(t, transforms.RandomHorizontalFlip)
    assert torch.equal(_seeded(t, image, 0), _seeded(t, image, 1))


@pytest.mark.parametrize('op, options', [
    (transforms.RandomResizedCrop, dict(scale=TDA_CROP_SCALE)),
    (transforms.RandomHorizontalFlip, dict(hflip=1.0)),
    (transforms.ColorJitter, dict(color_prob=1.0, jitter_prob=1.0, grayscale_prob=0.0)),
    (transforms.RandomGrayscale, dict(color_prob=1.0, color_strength=0.0, grayscale_prob=1.0)),
    (transforms.GaussianBlur, dict(blur_prob=1.0)),
])
def test_each_op_alone_changes_the_image(image, op, options):
    baseline = create_tda_transform(SIZE, **ALL_OFF)(image)
    t = create_tda_transform(SIZE, **{**ALL_OFF, **options})
    assert len(_find(t, op)) == 1
    assert not torch.equal(_seeded(t, image, 0), baseline)


def test_takes_a_float_tensor_as_torchvision_does(image):
    tensor = transforms.functional.to_tensor(image)
    out = _seeded(create_tda_transform(SIZE, blur_prob=1.0), tensor, 0)
    assert out.shape == (3, SIZE, SIZE) and out.dtype == torch.float32


@pytest.mark.parametrize('name', ['hflip', 'color_prob', 'jitter_prob', 'grayscale_prob', 'blur_prob'])
def test_probabilities_outside_0_1_are_refused(name):
    with pytest.raises(ValueError, match=f'{name} must be a probability'):
        create_tda_transform(SIZE, **{name: 1.5})
