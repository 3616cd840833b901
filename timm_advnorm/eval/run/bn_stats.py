"""Clean vs adversarial BN statistics of a mixture-BN model, per layer (Xie & Yuille 2020, Fig. 5; NoFrost Fig. 1).

Xie & Yuille plot the running mean and variance of both branches for 20 random channels of a ResNet-152 res3 block
and find the adversarial statistics different, and larger: the two-domain hypothesis. `collect_bn_stats` reads
them from every `MixtureBatchNorm2d`; `summarize_bn_stats` condenses each layer into a few numbers that make the
same point across depth.
"""
from typing import Any, Dict, List

import numpy as np
import torch.nn as nn

from ...layers import MixtureBatchNorm2d

__all__ = ['collect_bn_stats', 'summarize_bn_stats', 'default_bn_layer']


def collect_bn_stats(model: nn.Module) -> Dict[str, Dict[str, List[float]]]:
    """Running statistics of both branches of every mixture-BN layer, in module order.

    Returns:
        ``{layer: {clean_mean, clean_var, adv_mean, adv_var}}`` as lists of per-channel floats; empty for models
        without mixture BN (or without running statistics).
    """
    stats = {}
    for name, module in model.named_modules():
        if not isinstance(module, MixtureBatchNorm2d) or module.running_mean is None:
            continue
        adv = module.adv_bn
        stats[name] = dict(
            clean_mean=module.running_mean.detach().float().cpu().tolist(),
            clean_var=module.running_var.detach().float().cpu().tolist(),
            adv_mean=adv.running_mean.detach().float().cpu().tolist(),
            adv_var=adv.running_var.detach().float().cpu().tolist())
    return stats


def summarize_bn_stats(stats: Dict[str, Dict[str, List[float]]]) -> List[Dict[str, Any]]:
    """Per layer: how far apart the branches are, and whether adversarial statistics are the larger ones.

    Fields: ``layer``, ``channels``, ``mean_abs_diff`` (mean over channels of ``|μ_adv - μ_clean|``),
    ``var_log_ratio`` (mean of ``log(σ²_adv / σ²_clean)``; > 0: adversarial variance larger),
    ``frac_adv_var_larger``,
    ``frac_adv_mean_larger`` (share of channels where the adversarial value exceeds the clean one).
    """
    summary = []
    for layer, s in stats.items():
        clean_mean, adv_mean = np.asarray(s['clean_mean']), np.asarray(s['adv_mean'])
        clean_var, adv_var = np.asarray(s['clean_var']), np.asarray(s['adv_var'])
        tiny = np.finfo(np.float32).tiny
        summary.append(dict(
            layer=layer, channels=int(clean_mean.size),
            mean_abs_diff=float(np.mean(np.abs(adv_mean - clean_mean))),
            var_log_ratio=float(np.mean(np.log(np.maximum(adv_var, tiny) / np.maximum(clean_var, tiny)))),
            frac_adv_var_larger=float(np.mean(adv_var > clean_var)),
            frac_adv_mean_larger=float(np.mean(adv_mean > clean_mean))))
    return summary


def default_bn_layer(stats: Dict[str, Any]) -> str:
    """The layer plotted by default: the middle mixture-BN layer (Xie & Yuille plot a middle, res3, block)."""
    if not stats:
        raise ValueError('The model has no mixture-BN layer.')
    layers = list(stats)
    return layers[len(layers) // 2]
