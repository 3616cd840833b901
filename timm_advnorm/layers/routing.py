"""Explicit, per-model routing of mixture-BN layers.

A route is set on every `MixtureBatchNorm2d` of one model and restored on exit, so nested code (an attack inside a
training step, an evaluation inside a sweep) never leaks a route. There is no global flag and no routing by batch
position alone: the caller always names the branch.

Example:
    >>> with route(model, 'adv'):
    ...     logits_adv = model(x_adv)
    >>> with route(model, 'split', n_clean=len(x_clean)):
    ...     logits = model(torch.cat([x_clean, x_adv]))
    >>> with route(model, 'interleaved'):  # equal halves: the fast fused layout
    ...     logits_clean, logits_adv = deinterleave(model(interleave(x_clean, x_adv)))

Outside any `route` block a model runs on its inference branch: ``clean`` unless set otherwise by
`set_inference_branch` (mixture-BN entrypoints take it as the ``inference_branch`` keyword, which published models
record in ``config.json``). Route blocks restore it on exit.
"""
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from .branch_notice import forget_default_branch
from .mixture_bn import ROUTES, MixtureBatchNorm2d

__all__ = ['RouteState', 'mixture_bn_modules', 'has_mixture_bn', 'get_route', 'set_route', 'restore_route', 'route',
           'preserve_route', 'interleave', 'deinterleave', 'INFERENCE_BRANCHES', 'INFERENCE_BRANCH_ARG',
           'check_inference_branch', 'set_inference_branch', 'get_inference_branch']

#: The routes of a model's mixture BN layers, as `get_route` returns them and `restore_route` takes them back.
RouteState = List[Tuple[MixtureBatchNorm2d, str, int, float]]

#: Routes a model may run on outside any `route` block.
INFERENCE_BRANCHES: Tuple[str, ...] = ('clean', 'adv')
#: Model keyword of the mixture-BN entrypoints, and ``config.json`` ``model_args`` key, naming the inference branch.
INFERENCE_BRANCH_ARG = 'inference_branch'


def mixture_bn_modules(model: nn.Module) -> List[MixtureBatchNorm2d]:
    """Every `MixtureBatchNorm2d` in `model`, in module order."""
    return [m for m in model.modules() if isinstance(m, MixtureBatchNorm2d)]


def has_mixture_bn(model: nn.Module) -> bool:
    """Whether `model` holds at least one `MixtureBatchNorm2d`."""
    return any(isinstance(m, MixtureBatchNorm2d) for m in model.modules())


def get_route(model: nn.Module) -> RouteState:
    """Snapshot of every mixture-BN layer's route, for `restore_route`."""
    return [(m, m.route, m.n_clean, m.gamma) for m in mixture_bn_modules(model)]


def restore_route(state: RouteState) -> None:
    """Put back the routes captured by `get_route`."""
    for module, name, n_clean, gamma in state:
        module.route, module.n_clean, module.gamma = name, n_clean, gamma


def set_route(model: nn.Module, name: str, n_clean: Optional[int] = None, gamma: Optional[float] = None) -> None:
    """Route every mixture-BN layer of `model`.

    Args:
        model: Any module; one without mixture BN accepts only the ``clean`` route (its sole branch).
        name: ``clean``, ``adv``, ``split``, ``interleaved`` or ``mix``.
        n_clean: Rows routed to the clean branch; required for ``split``.
        gamma: Adversarial weight in [0, 1]; required for ``mix``.

    Raises:
        ValueError: An unknown route, a missing or out-of-range argument, or an adversarial route on a model without
            mixture BN.
    """
    if name not in ROUTES:
        raise ValueError(f'Unknown route {name!r}, expected one of {ROUTES}.')
    if name == 'split' and (n_clean is None or n_clean < 0):
        raise ValueError('The split route needs n_clean >= 0.')
    if name == 'mix' and (gamma is None or not 0.0 <= gamma <= 1.0):
        raise ValueError('The mix route needs gamma in [0, 1].')
    modules = mixture_bn_modules(model)
    if not modules and name != 'clean':
        raise ValueError(f'Route {name!r} needs a model with MixtureBatchNorm2d layers; this model has none.')
    for m in modules:
        m.route = name
        m.n_clean = int(n_clean) if n_clean is not None else 0
        m.gamma = float(gamma) if gamma is not None else 0.0


@contextmanager
def preserve_route(model: nn.Module) -> Iterator[None]:
    """Restore `model`'s routes on exit, whatever the body sets."""
    state = get_route(model)
    try:
        yield
    finally:
        restore_route(state)


@contextmanager
def route(model: nn.Module, name: str, n_clean: Optional[int] = None, gamma: Optional[float] = None) -> Iterator[None]:
    """Context manager: route `model` as `set_route` does, then restore the previous routes."""
    with preserve_route(model):
        set_route(model, name, n_clean=n_clean, gamma=gamma)
        yield


def check_inference_branch(branch: str) -> str:
    """`branch` itself, once checked to be a branch a model may run on outside route blocks.

    Raises:
        ValueError: `branch` is not ``clean`` or ``adv``.
    """
    if branch not in INFERENCE_BRANCHES:
        raise ValueError(f'The inference branch must be one of {INFERENCE_BRANCHES}, got {branch!r}.')
    return branch


def set_inference_branch(model: nn.Module, branch: str) -> nn.Module:
    """Route every mixture-BN layer of `model` to `branch` for good: what a forward outside any `route` uses.

    This is the branch a published model is meant to run on; `route` blocks restore it on exit.

    Args:
        model: A model with mixture BN.
        branch: ``clean`` or ``adv``.

    Returns:
        `model`, for chaining.

    Raises:
        ValueError: `branch` is not ``clean`` or ``adv``, or `model` has no mixture BN.
    """
    check_inference_branch(branch)
    if not has_mixture_bn(model):
        raise ValueError('An inference branch needs a model with MixtureBatchNorm2d layers; this model has none.')
    set_route(model, branch)
    forget_default_branch(model)
    return model


def get_inference_branch(model: nn.Module) -> Optional[str]:
    """The branch a forward of `model` runs on now: ``clean`` or ``adv`` when every mixture-BN layer is routed to it.

    Returns:
        None for a model without mixture BN, or one whose layers are on another route (``split``, ``mix``, ...)
        or on different routes.
    """
    routes = {m.route for m in mixture_bn_modules(model)}
    if len(routes) != 1:
        return None
    branch = routes.pop()
    return branch if branch in INFERENCE_BRANCHES else None


def interleave(clean: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """One batch of ``(clean_0, adv_0, clean_1, adv_1, ...)`` rows, the input layout of the ``interleaved`` route."""
    if clean.shape != adv.shape:
        raise ValueError(f'interleave needs clean and adversarial batches of one shape, got {tuple(clean.shape)} '
                         f'and {tuple(adv.shape)}.')
    return torch.stack([clean, adv], dim=1).flatten(0, 1)


def deinterleave(output: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The clean (even) and adversarial (odd) rows of an ``interleaved`` forward's output, as views."""
    return output[0::2], output[1::2]
