"""The papers each built-in training method comes from, in one place: what a model card cites for a run's
``--method`` (only those of its method, never the whole reading list)."""
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Tuple

__all__ = ['Paper', 'METHOD_PAPERS', 'method_papers']


@dataclass(frozen=True)
class Paper:
    """A paper as timm's model cards list it: title and link (authors and venue for a reference list)."""

    title: str
    authors: str
    venue: str
    url: str


GOODFELLOW2015 = Paper('Explaining and Harnessing Adversarial Examples', 'I. Goodfellow, J. Shlens, C. Szegedy',
                       'ICLR 2015', 'https://arxiv.org/abs/1412.6572')
MADRY2018 = Paper('Towards Deep Learning Models Resistant to Adversarial Attacks', 'A. Madry et al.', 'ICLR 2018',
                  'https://arxiv.org/abs/1706.06083')
KANNAN2018 = Paper('Adversarial Logit Pairing', 'H. Kannan, A. Kurakin, I. Goodfellow', 'arXiv 2018',
                   'https://arxiv.org/abs/1803.06373')
XIE_YUILLE2020 = Paper('Intriguing Properties of Adversarial Training at Scale', 'C. Xie, A. Yuille', 'ICLR 2020',
                       'https://arxiv.org/abs/1906.03787')
ADVPROP2020 = Paper('Adversarial Examples Improve Image Recognition', 'C. Xie et al.', 'CVPR 2020',
                    'https://arxiv.org/abs/1911.09665')
FAST_ADVPROP2022 = Paper('Fast AdvProp', 'J. Mei et al.', 'ICLR 2022', 'https://arxiv.org/abs/2204.09838')
NOFROST2022 = Paper('Removing Batch Normalization Boosts Adversarial Training', 'H. Wang et al.', 'ICML 2022',
                    'https://arxiv.org/abs/2207.01156')
DEEPAUGMENT2021 = Paper('The Many Faces of Robustness: A Critical Analysis of Out-of-Distribution Generalization',
                        'D. Hendrycks et al.', 'ICCV 2021', 'https://arxiv.org/abs/2006.16241')

#: Per built-in method, the papers it comes from: the method's origin first, then the study it follows here
#: (Xie & Yuille's §4 for the BN-model strategies). Vanilla training comes from none.
METHOD_PAPERS: Mapping[str, Tuple[Paper, ...]] = MappingProxyType({
    'vanilla': (),
    'madry': (MADRY2018, XIE_YUILLE2020),
    'mixed': (GOODFELLOW2015, XIE_YUILLE2020),
    'alp': (KANNAN2018, XIE_YUILLE2020),
    'mbn': (XIE_YUILLE2020, ADVPROP2020),
    'fast_advprop': (FAST_ADVPROP2022,),
    'nofrost': (NOFROST2022,),
    'nofrost_star': (NOFROST2022, DEEPAUGMENT2021),
})


def method_papers(method: str) -> Tuple[Paper, ...]:
    """The papers `method` comes from; none for a method not listed (a plug-in's)."""
    return METHOD_PAPERS.get(method, ())
