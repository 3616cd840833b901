"""Corruption error (CE) and its mean (mCE), the ImageNet-C summary numbers of Hendrycks & Dietterich (ICLR 2019).

A model's error on one corruption, summed over the five severities, is divided by AlexNet's on the same corruption:
``CE_c = sum_s E_{s,c} / sum_s E^AlexNet_{s,c}``, and mCE is the mean of CE over the 15 ImageNet-C corruptions.
Fast AdvProp reports ImageNet-C this way (ResNet-152: 49.8 mCE). The AlexNet errors are its top-1 errors on the
ImageNet validation set, averaged over the severities, as the benchmark's authors published them: the numbers only
mean something for ImageNet models evaluated on corruptions of the ImageNet validation images (on any other data
they are a ratio to an unrelated baseline, and the summary says so).
"""
from typing import Dict, Mapping, Optional, Tuple

from ...attacks.corruptions import IMAGENET_C_CORRUPTIONS, SEVERITIES

__all__ = ['ALEXNET_MEAN_ERROR', 'corruption_errors']

#: AlexNet's top-1 error on ImageNet-C, mean over severities 1-5, per corruption.
ALEXNET_MEAN_ERROR = {
    'gaussian_noise': 0.886428, 'shot_noise': 0.894468, 'impulse_noise': 0.922640, 'defocus_blur': 0.819880,
    'glass_blur': 0.826268, 'motion_blur': 0.785948, 'zoom_blur': 0.798360, 'snow': 0.866816, 'frost': 0.826572,
    'fog': 0.819324, 'brightness': 0.564592, 'contrast': 0.853204, 'elastic_transform': 0.646056,
    'pixelate': 0.717840, 'jpeg_compression': 0.606500,
}


def corruption_errors(accuracy: Mapping[Tuple[str, int], float]) -> Optional[Dict[str, object]]:
    """CE per corruption and mCE, in percent, from accuracies (percent) keyed by ``(corruption, severity)``.

    Returns None unless every ImageNet-C corruption was measured at every severity (a partial suite has no mCE).
    """
    if any((name, severity) not in accuracy for name in IMAGENET_C_CORRUPTIONS for severity in SEVERITIES):
        return None
    ce = {}
    for name in IMAGENET_C_CORRUPTIONS:
        mean_error = sum(1.0 - accuracy[name, severity] / 100.0 for severity in SEVERITIES) / len(SEVERITIES)
        ce[name] = round(100.0 * mean_error / ALEXNET_MEAN_ERROR[name], 4)
    return dict(mce=round(sum(ce.values()) / len(ce), 4), ce=ce, baseline='AlexNet on ImageNet-C')
