"""What a conversion is told, as typed, frozen options: built once from the command line and read by the command's
call of the format's converter.

Each field that a command-line option fills declares it (`option_fields.option`: the flag's help and parser
arguments, its default the field's), as the other commands' options do: ``timm-advnorm-convert`` generates each
format's sub-command from the fields of that format's options class (`FORMATS`) and fills it by option name
(`timm_advnorm.commands.convert.convert_options`).
"""
from dataclasses import MISSING, dataclass
from typing import Dict, Optional, Type

from ..option_fields import option

__all__ = ['ConvertOptions', 'FastAdvPropOptions', 'SourceFormat', 'FORMATS']


@dataclass(frozen=True)
class ConvertOptions:
    """What the conversion of every format is told.

    Attributes:
        format: The source format: the sub-command (`FORMATS`), given by no option of its own.
        src: The file of the authors' release to convert (its sub-command's help names the format's file).
        dst: The export folder to write.
        model: The target architecture (None: detected from the weights).
        overwrite: Replace `dst`, an earlier export.
    """

    format: str
    src: str = option(MISSING, "the file of the authors' release", flags=('src',), metavar='SRC')
    dst: str = option(MISSING, 'export folder to write', flags=('dst',), metavar='DST')
    model: Optional[str] = option(None, 'target architecture (default: detected from the weights)')
    overwrite: bool = option(False, 'replace DST, an earlier export')


@dataclass(frozen=True)
class FastAdvPropOptions(ConvertOptions):
    """What a Fast AdvProp conversion is told besides.

    Attributes:
        branch: Write this branch (``clean``, ``adv``) as the plain timm ResNet (None: the whole mixture-BN model).
    """

    branch: Optional[str] = option(
        None, 'write one branch as the plain timm ResNet (Fast AdvProp infers on clean)', choices=('clean', 'adv'))


@dataclass(frozen=True)
class SourceFormat:
    """A released format the command converts: its sub-command.

    Attributes:
        title: What it is (the sub-command's help and description).
        source: The file SRC is: what its help and its refusal of a folder say.
        options_class: The options of its conversion, whose fields declare the sub-command's options.
    """

    title: str
    source: str
    options_class: Type[ConvertOptions] = ConvertOptions


#: The formats by sub-command, in the order ``--help`` lists them.
FORMATS: Dict[str, SourceFormat] = {
    'fast-advprop': SourceFormat('Fast AdvProp (Mei et al., ICLR 2022) mixture-BN ResNet checkpoint.',
                                 'checkpoint saved by fast_advprop/imagenet.py (.pth.tar)', FastAdvPropOptions),
    'nofrost': SourceFormat('NoFrost (Wang et al., ICML 2022) NF-ResNet checkpoint.',
                            'best_RA.pth, best_SA.pth or latest.pth'),
    'tensorpack-resnet': SourceFormat('Feature Denoising (Xie et al., CVPR 2019) tensorpack ResNet baseline.',
                                      'R152.npz (or an R50/R101 .npz of the same code)'),
}
