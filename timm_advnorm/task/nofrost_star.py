"""NoFrost*: one normalizer-free model fitting clean, adversarial, DeepAugment and TDA images (Wang et al., *Removing
Batch Normalization Boosts Adversarial Training*, ICML 2022, §3.2 and §4.4).

The released code (amazon-science/normalizer-free-robust-training, ``CRT_TDAT.py``), which produced the published
numbers, is what the defaults follow. Its loader yields ``batch_size / 3`` images per step, each three times: as a
training crop (clean), from a pre-generated DeepAugment folder and through texture-debiased augmentation (TDA). PGD
attacks the clean sub-batch, and ``loss = (CE(clean) + CE(deepaug) + CE(tda) + CE(adv)) / 4`` (without the attack,
``(CE(clean) + CE(deepaug) + CE(tda)) / 3``). The paper's Eq. 2 gives each image *either* its DeepAugment or its TDA
view, with probability ½ each, and divides by 3: ``--star-augment either``.

Here each loader row is one image and its views are made on the fly in the training step, in pixel space (the
`InputSpace` undoes the loader's normalization, the view is made in [0, 1], then normalized again). The loader batch
holds ``--batch-size`` divided by the number of views made from it (`batch_scale`): ``--batch-size 30`` loads 10
images and trains on 30 view rows plus 10 adversarial ones, as the released code with a batch of 32 per GPU
(``int(32 / 3) = 10`` per sub-batch). All rows go through the model in one forward: a model without batch norm gives
each row the output it gives it alone. Where this differs from the released code:

* **DeepAugment on the fly** (`timm_advnorm.augment.DeepAugment`), on the loader's crop, instead of a random crop of
  an image pre-distorted at full size; the images of a step share one draw of distortions (the original draws its
  activation distortions per image). The released loader indexes the
  concatenation ``[EDSR folder, CAE folder]`` with ImageNet's indices only, so it trains on the EDSR images alone
  (the CAE half is never reached when the EDSR folder holds every training image): one network,
  ``--deepaugment-net``, default EDSR.
* **TDA on the loader's crop**: colour distortion (probability 0.5), a horizontal flip and optionally a blur, applied
  to the training crop, not TDA's own less aggressive crop (scale 0.64-1) of the original image, which the step never
  sees. Re-cropping the crop would make the crop more aggressive, against TDA's purpose, so TDA adds no crop here.
* **The views of an image share its crop**: the released loader crops each view independently.
* **DeepAugment runs in the step**: its network's forward is time the released training did not spend (the images
  were made beforehand). `passes_per_image` counts it, in training passes of the model (`deepaugment_passes`: EDSR
  costs about 0.9 of a pass of nf_resnet26 and 0.5 of nf_resnet50 per image, the CAE 2.5 and 1.4), so that the
  logged budget and ``--same-budget`` runs are what the step spends; the released code's budget is the rest.

A resumed run restarts DeepAugment's distortion sequence from its seed, as the attacks restart theirs.
"""
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from ..attacks.base import Attack
from ..attacks.space import InputSpace
from ..augment.deepaugment import NETS, DeepAugment
from ..augment.tda import create_tda_transform
from ..arg_types import positive_float, probability
from .adversarial import TrainingContext
from .method_options import MethodOptions, option
from .nofrost import NofrostTask
from .registry import register_task
from .training_attack import TrainingAttackOptions

__all__ = ['AUGMENT_MODES', 'NofrostStarOptions', 'NofrostStarTask', 'VIEWS', 'deepaugment_passes',
           'normalized_view_weights']

#: The views of an image NoFrost* trains on, in the order of ``--star-views``: the loader's image, its adversarial
#: copy (the training attack), its DeepAugment copy and its texture-debiased copy.
VIEWS = ('clean', 'adv', 'deepaugment', 'tda')
#: ``both``: every image's DeepAugment and TDA views (the released code); ``either``: one of them, drawn per image
#: with probability ½ (the paper's Eq. 2).
AUGMENT_MODES = ('both', 'either')
_AUGMENTATIONS = ('deepaugment', 'tda')
#: Each view's loss weight, by view name (`normalized_view_weights`).
ViewWeights = Dict[str, float]


def normalized_view_weights(views: Sequence[str], weights: Optional[Sequence[float]] = None,
                            augment: str = 'both') -> ViewWeights:
    """Each view's loss weight, scaled so that an image's weights sum to 1.

    Args:
        views: The views on, from `VIEWS`.
        weights: Their relative weights, in the order of `views`; None gives every view the same weight (the
            released code's ``/ 4``, or ``/ 3`` without the attack).
        augment: ``'either'`` gives each image one of its DeepAugment and TDA views, so those two count half each
            in the sum: equal weights give the paper's Eq. 2 (a third each for the clean, the augmented and the
            adversarial image).

    Raises:
        ValueError: Repeated or unknown views, a weight count unlike the view count, a weight <= 0, or ``either``
            without both augmentation views; one line.
    """
    unknown = [v for v in views if v not in VIEWS]
    if unknown or len(set(views)) != len(views) or not views:
        raise ValueError(f'NoFrost* views must be distinct names from {", ".join(VIEWS)}, got {", ".join(views)}.')
    if augment not in AUGMENT_MODES:
        raise ValueError(f'NoFrost* augment mode must be one of {", ".join(AUGMENT_MODES)}, got {augment!r}.')
    if augment == 'either' and not set(_AUGMENTATIONS) <= set(views):
        raise ValueError("NoFrost* --star-augment either draws each image's DeepAugment or TDA view: both must be "
                         "among --star-views.")
    weights = [1.0] * len(views) if weights is None else list(weights)
    if len(weights) != len(views) or min(weights) <= 0:
        raise ValueError(f'NoFrost* needs one weight > 0 per view ({", ".join(views)}), got '
                         f'{" ".join(f"{w:g}" for w in weights)}.')
    share = {view: 0.5 if augment == 'either' and view in _AUGMENTATIONS else 1.0 for view in views}
    total = sum(share[view] * weight for view, weight in zip(views, weights))
    return {view: weight / total for view, weight in zip(views, weights)}


@dataclass(frozen=True)
class NofrostStarOptions(MethodOptions):
    """NoFrost*'s options: the views and their weights, the objective variant, the DeepAugment network and weights,
    TDA's colour distortion and blur; the attack is the shared training-attack options, as NoFrost's."""

    star_views: Tuple[str, ...] = option(VIEWS, nargs='+', choices=VIEWS, metavar='VIEW',
                                         help=f'NoFrost*: views trained on, from {", ".join(VIEWS)}.')
    star_view_weights: Optional[Tuple[float, ...]] = option(
        None, nargs='+', type=positive_float, metavar='W',
        help='NoFrost*: relative loss weight of each of --star-views, in its order, scaled to sum to 1 per image '
             '(default: equal, the released code\'s /4).')
    star_augment: str = option(
        'both', choices=AUGMENT_MODES,
        help='NoFrost*: "both" gives every image its DeepAugment and TDA views (the released code, the published '
             'numbers); "either" one of them with probability 1/2 (Eq. 2, the two weigh half each in the sum to 1).')
    deepaugment_net: str = option(
        'edsr', choices=NETS, help='NoFrost*: DeepAugment network (the released code trains on EDSR images).')
    deepaugment_weights: Optional[str] = option(
        None, metavar='PATH', help="NoFrost*: the network's pretrained weights from hendrycks/imagenet-r "
                                   '(EDSR_Weights/edsr_baseline_x4.pt or CAE_Weights/model_final.state).')
    deepaugment_random_weights: bool = option(
        False, help='NoFrost*: run DeepAugment on an untrained network instead, for tests and demos only: its images '
                    'are noise, not DeepAugment.')
    tda_color_prob: float = option(0.5, type=probability, help='NoFrost*: probability of TDA\'s colour distortion.')
    tda_color_strength: float = option(1.0, type=positive_float,
                                       help='NoFrost*: SimCLR strength of TDA\'s colour jitter.')
    tda_blur_prob: float = option(
        0.0, type=probability, help='NoFrost*: probability of a Gaussian blur in TDA (the released code has none).')


def _forward_flops(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> int:
    """FLOPs of the matrix products and convolutions of ``fn(x)`` (torch's `FlopCounterMode`), without gradients."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(x)
    return counter.get_total_flops()


def deepaugment_passes(model: nn.Module, deepaugment: DeepAugment, size: int = 64) -> float:
    """What DeepAugment costs per image, in training passes of `model`: its network's forward FLOPs over those of a
    forward and backward of the model (three forwards: the backward costs about two).

    Counted on one image of `size` px: both networks are convolutional, so the ratio is the same at every size. The
    model's forward runs with its random state restored afterwards (dropout draws nothing the run would have drawn),
    DeepAugment on a seeded copy (its own distortion sequence does not advance).
    """
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == 'cuda' else []):
        model_flops = _forward_flops(model, torch.zeros(1, 3, size, size, device=device))
    probe = copy.copy(deepaugment).manual_seed(0)
    return _forward_flops(probe, torch.zeros(1, 3, size, size, device=deepaugment.device)) / (3 * model_flops)


def _rows(chosen: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Indices on `device` of the rows a CPU mask `chosen` selects."""
    return chosen.nonzero().squeeze(1).to(device)


@register_task('nofrost_star')
class NofrostStarTask(NofrostTask):
    """NoFrost* training step: the views of each loader image through the model at once, their losses weighted.

    Refuses a model with batch norm (NoFrost's check). NoFrost's λ (`adv_weight`) is the adversarial view's share of
    the loss, 1/4 by default.

    Args:
        model: A normalizer-free model.
        attack: The training attack (NoFrost's PGD); None when the adversarial view is off.
        space: The model's input normalization, to make the DeepAugment and TDA views in pixel space.
        views: The views trained on, from `VIEWS` (default all four).
        view_weights: Their relative loss weights, in the order of `views` (`normalized_view_weights`); None:
            equal.
        augment: ``'both'`` (the released code) or ``'either'`` (Eq. 2), `AUGMENT_MODES`.
        deepaugment: Makes the DeepAugment view (a batch in [0, 1] to a distorted one); needed when that view is on.
            It is moved to the batch's device at the first step.
        tda_options: Keyword arguments of `create_tda_transform` for the TDA view (``color_prob``,
            ``color_strength``, ``blur_prob``, ...); its size, crop and tensor output are set here.
        **kwargs: The base task's (``mixup_fn``, ``criterion_kwargs``, ...).

    Raises:
        ValueError: A model with batch norm, bad views or weights, the adversarial view without an attack, or the
            DeepAugment view without `deepaugment`.
    """

    options_class = NofrostStarOptions

    def __init__(
            self,
            model: nn.Module,
            attack: Optional[Attack] = None,
            *,
            space: InputSpace,
            views: Sequence[str] = VIEWS,
            view_weights: Optional[Sequence[float]] = None,
            augment: str = 'both',
            deepaugment: Optional[DeepAugment] = None,
            tda_options: Optional[Dict[str, Any]] = None,
            **kwargs,
    ):
        weights = normalized_view_weights(views, view_weights, augment)
        if 'adv' in weights and attack is None:
            raise ValueError('NoFrost*: the adversarial view needs an attack.')
        if 'deepaugment' in weights and deepaugment is None:
            raise ValueError('NoFrost*: the DeepAugment view needs deepaugment=DeepAugment(...).')
        super().__init__(model, attack if 'adv' in weights else None, adv_weight=weights.get('adv', 0.0), **kwargs)
        self.space = space
        self.view_weights = weights
        self.augment = augment
        self.deepaugment = deepaugment
        self.tda_options = dict(tda_options or {})
        #: DeepAugment's cost per image it makes, in training passes of the model (`deepaugment_passes`).
        self.deepaugment_passes = deepaugment_passes(model, deepaugment) if 'deepaugment' in weights else 0.0
        self._tda_transforms: Dict[Tuple[int, int], Callable[[torch.Tensor], torch.Tensor]] = {}

    @classmethod
    def check_options(cls, options: NofrostStarOptions, attack_options: TrainingAttackOptions) -> None:
        """Views and weights that fit together, and DeepAugment weights when its view is on: the authors' file,
        which must exist, or the explicit ``--deepaugment-random-weights``, not both."""
        normalized_view_weights(options.star_views, options.star_view_weights, options.star_augment)
        if 'deepaugment' not in options.star_views:
            return
        if options.deepaugment_weights is None and not options.deepaugment_random_weights:
            raise ValueError(f"NoFrost*'s DeepAugment view needs the authors' pretrained "
                             f"{options.deepaugment_net.upper()} network: --deepaugment-weights PATH, or "
                             f"--deepaugment-random-weights for tests and demos, or leave deepaugment out of "
                             f"--star-views.")
        if options.deepaugment_weights is not None and options.deepaugment_random_weights:
            raise ValueError('--deepaugment-weights and --deepaugment-random-weights exclude each other.')
        if options.deepaugment_weights is not None and not Path(options.deepaugment_weights).expanduser().is_file():
            raise ValueError(f'--deepaugment-weights: no file {options.deepaugment_weights}')

    @classmethod
    def used_attack_options(cls, options: NofrostStarOptions) -> Tuple[str, ...]:
        """NoFrost's, when the adversarial view is on."""
        return super().used_attack_options(options) if 'adv' in options.star_views else ()

    @classmethod
    def task_kwargs(cls, options: NofrostStarOptions, attack_options: TrainingAttackOptions,
                    context: TrainingContext) -> Dict[str, Any]:
        """The base class's, with the input space and the DeepAugment network (seeded per process, as the attack)
        when its view is on."""
        kwargs = {**super().task_kwargs(options, attack_options, context), 'space': context.space}
        if 'deepaugment' in options.star_views:
            kwargs['deepaugment'] = DeepAugment(
                options.deepaugment_net, options.deepaugment_weights, seed=context.seed + context.rank,
                allow_random_weights=options.deepaugment_random_weights)
        return kwargs

    @classmethod
    def method_kwargs(cls, options: NofrostStarOptions) -> Dict[str, Any]:
        """The views, weights and mode, and the TDA settings."""
        tda_options = dict(color_prob=options.tda_color_prob, color_strength=options.tda_color_strength,
                           blur_prob=options.tda_blur_prob)
        return dict(views=options.star_views, view_weights=options.star_view_weights, augment=options.star_augment,
                    tda_options=tda_options)

    @property
    def row_blocks(self) -> List[str]:
        """The blocks of rows of a training forward, one loader batch each, in order: the non-adversarial views
        (``augmented`` for the either-or view), then ``adv``."""
        blocks = [v for v in ('clean', 'deepaugment', 'tda') if v in self.view_weights]
        if self.augment == 'either':
            blocks = [b for b in blocks if b not in _AUGMENTATIONS] + ['augmented']
        return blocks + (['adv'] if 'adv' in self.view_weights else [])

    @property
    def passes_per_image(self) -> float:
        """One training pass per view of a loader image, plus the attack's iterations when the adversarial view is
        on, plus DeepAugment's network for the images it makes: ``K + 4 + d`` for the released code's four views
        (``K + 3 + d / 2`` with ``either``), d = `deepaugment_passes`; the released code's own budget is ``K + 4``."""
        deepaugment_share = 0.0 if 'deepaugment' not in self.view_weights else 0.5 if self.augment == 'either' else 1.0
        return float(len(self.row_blocks)) + self.attack_steps + deepaugment_share * self.deepaugment_passes

    @property
    def batch_scale(self) -> float:
        """Loader rows per ``--batch-size`` row: one over the non-adversarial views made from each loader image, so
        that they fill the configured batch as the released code's sub-batches do (1/3 by default)."""
        return 1.0 / max(1, len([b for b in self.row_blocks if b != 'adv']))

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The views of the (mixed) loader batch through the model in one forward; the weighted sum of their losses.

        Returns ``loss``, ``output`` (the clean rows' logits, else the first block's) and one ``loss_<block>`` per
        block when there are several.
        """
        input, target = self.mix(input, target)
        from_deepaugment = torch.rand(input.shape[0]) < 0.5 if self.augment == 'either' else None
        blocks = self.row_blocks
        rows = [self._block_input(block, input, target, from_deepaugment) for block in blocks]
        outputs = dict(zip(blocks, self.trainable_module(torch.cat(rows)).split(input.shape[0])))
        losses = {block: self.criterion(out, target) for block, out in outputs.items()}
        loss = sum(self._block_loss(block, outputs[block], target, losses[block], from_deepaugment)
                   for block in blocks)
        output = outputs.get('clean', outputs[blocks[0]])
        if len(blocks) == 1:
            return {'loss': loss, 'output': output}
        return {'loss': loss, 'output': output, **self.loss_parts(**{f'loss_{b}': losses[b] for b in blocks})}

    def _block_loss(self, block: str, output: torch.Tensor, target: torch.Tensor, mean_loss: torch.Tensor,
                    from_deepaugment: Optional[torch.Tensor]) -> torch.Tensor:
        """The block's weighted loss; for the either-or block, each row weighted by the view it was given."""
        if block != 'augmented':
            return self.view_weights[block] * mean_loss
        parts = []
        for view, chosen in (('deepaugment', from_deepaugment), ('tda', ~from_deepaugment)):
            index = _rows(chosen, output.device)
            if len(index):
                share = len(index) / output.shape[0]
                parts.append(self.view_weights[view] * share * self.criterion(output[index], target[index]))
        return sum(parts)

    def _block_input(self, block: str, input: torch.Tensor, target: torch.Tensor,
                     from_deepaugment: Optional[torch.Tensor]) -> torch.Tensor:
        """The normalized rows of `block` made from the loader batch `input`."""
        if block == 'clean':
            return input
        if block == 'adv':
            return self.adversarial(input, target)
        with torch.no_grad():
            pixels = self.space.to_pixels(input).clamp(0.0, 1.0)
            if block == 'augmented':
                return self.space.from_pixels(self._either_view(pixels, from_deepaugment))
            view = self._deepaugment_view if block == 'deepaugment' else self._tda_view
            return self.space.from_pixels(view(pixels))

    def _either_view(self, pixels: torch.Tensor, from_deepaugment: torch.Tensor) -> torch.Tensor:
        """Eq. 2's augmented image: DeepAugment's where `from_deepaugment`, TDA's elsewhere."""
        out = torch.empty_like(pixels)
        for chosen, view in ((from_deepaugment, self._deepaugment_view), (~from_deepaugment, self._tda_view)):
            index = _rows(chosen, pixels.device)
            if len(index):
                out[index] = view(pixels[index])
        return out

    def _deepaugment_view(self, pixels: torch.Tensor) -> torch.Tensor:
        """DeepAugment's copy of a batch in [0, 1], its network moved to the batch's device at the first call."""
        if self.deepaugment.device != pixels.device:
            self.deepaugment.to(pixels.device)
        return self.deepaugment(pixels)

    def _tda_view(self, pixels: torch.Tensor) -> torch.Tensor:
        """TDA's copy of a batch in [0, 1], drawn per image (torch's global RNG, as the loader's transforms)."""
        transform = self._tda_transform(tuple(pixels.shape[-2:]))
        return torch.stack([transform(image) for image in pixels])

    def _tda_transform(self, size: Tuple[int, int]) -> Callable[[torch.Tensor], torch.Tensor]:
        """TDA at the batch's size without a crop of its own (the rows are already crops): a flip, the colour
        distortion and the optional blur on a CHW tensor in [0, 1], kept per size."""
        if size not in self._tda_transforms:
            self._tda_transforms[size] = create_tda_transform(size, scale=None, normalize=False, **self.tda_options)
        return self._tda_transforms[size]
