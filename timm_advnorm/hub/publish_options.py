"""What a publication is told, as typed, frozen options: built once from the command line and read by `publish`.

``timm-advnorm-publish`` parses its arguments and converts them into one `PublishOptions`
(`timm_advnorm.commands.publish.publish_options`); `timm_advnorm.hub.publish.publish` never sees the parsed command
line. Each field that a command-line option fills declares it (`option_fields.option`: the flag's help and
parser arguments, its default the field's), as the training and evaluation options do: the command generates its
parser from these declarations and fills every group by option name. The options are grouped by what they decide:
what is exported (`ExportOptions`), where it goes (`TargetOptions`) and what the model card states besides the
model's own facts (`CardOptions`). Publishing never
changes them: the inference branch it resolves from the checkpoint's record goes into a new object
(`dataclasses.replace`).
"""
from dataclasses import MISSING, dataclass, field
from typing import Optional

from ..layers import INFERENCE_BRANCHES
from ..option_fields import option

__all__ = ['DEFAULT_COMMIT_MESSAGE', 'ExportOptions', 'TargetOptions', 'CardOptions', 'PublishOptions',
           'OPTIONS_CLASSES']

#: The Hub commit message of an upload (``--commit-message`` replaces it).
DEFAULT_COMMIT_MESSAGE = 'Add timm-advnorm model'


@dataclass(frozen=True)
class ExportOptions:
    """What is exported.

    Attributes:
        checkpoint: A ``timm-advnorm-train`` checkpoint, a state dict (``.pth``/``.safetensors``), an export folder,
            ``hf-hub:org/name`` or ``local-dir:PATH``.
        model: The architecture, for checkpoints that do not name it (bare state dicts); None: the checkpoint's.
        ema: Export the checkpoint's EMA weights.
        branch: Export this mixture-BN branch (``clean``, ``adv``) as the plain timm architecture.
        inference_branch: The branch a whole mixture-BN model loads routed to (None: the one the checkpoint records).
    """

    checkpoint: str = option(MISSING, 'timm-advnorm-train checkpoint, state dict (.pth/.safetensors), export folder, '
                                      'hf-hub:org/name or local-dir:PATH', flags=('checkpoint',))
    model: Optional[str] = option(None, 'architecture, when the checkpoint does not name it (bare state dicts)')
    ema: bool = option(False, "publish the checkpoint's EMA weights", flags=('--use-ema',), aliases=('--ema',))
    branch: Optional[str] = option(
        None, 'publish this mixture-BN branch as the plain timm architecture (no plugin needed)',
        choices=INFERENCE_BRANCHES)
    inference_branch: Optional[str] = option(
        None, 'branch a whole mixture-BN model loads routed to, recorded in config.json (default: the one the '
              'checkpoint records; required where it records none)', choices=INFERENCE_BRANCHES)


@dataclass(frozen=True)
class TargetOptions:
    """Where the export goes: a Hub repository, a local folder, or both.

    Attributes:
        repo_id: The Hub repository ``org/name`` to upload to (None: no upload).
        local_dir: The folder to write the exact upload to (None: a temporary one).
        dry_run: Write `local_dir` only, upload nothing.
        overwrite: Replace an earlier export in `local_dir`, or the files of a non-empty Hub repository.
        private: Create the Hub repository as private.
        revision: The Hub branch to upload to (None: ``main``).
        commit_message: The Hub commit message.
    """

    repo_id: Optional[str] = option(None, 'Hub repository org/name to upload to (token from HF_TOKEN)')
    local_dir: Optional[str] = option(None, 'write the exact folder that is (or would be) uploaded here')
    dry_run: bool = option(False, 'write --local-dir only, upload nothing')
    overwrite: bool = option(False, 'replace an earlier export in --local-dir, or a non-empty Hub repository')
    private: bool = option(False, 'create the Hub repository as private')
    revision: Optional[str] = option(None, 'Hub branch to upload to (default: main)')
    commit_message: str = option(DEFAULT_COMMIT_MESSAGE, 'Hub commit message')

    @property
    def upload(self) -> bool:
        """Whether the export is uploaded to the Hub."""
        return bool(self.repo_id) and not self.dry_run


@dataclass(frozen=True)
class CardOptions:
    """What the model card states besides the model's own facts, and the template it is written from.

    Attributes:
        results: A ``timm-advnorm-validate`` results JSON whose numbers the card reports (None: no results).
        allow_reduced_results: Accept results of a reduced (smoke-test) protocol; the card then says so first.
        allow_other_results: Accept results that evaluated other weights than those published, or that do not record
            which; the card then says so beside the numbers.
        template: The model card template file (None: the package's `hub.publish.DEFAULT_CARD_TEMPLATE`).
        license: The card's license (None: the weights' pretrained config's, else ``other``).
    """

    results: Optional[str] = option(None, 'timm-advnorm-validate results JSON for the card')
    allow_reduced_results: bool = option(
        False, 'publish results of a reduced (timm-advnorm-validate --reduced, smoke-test) protocol; the card then '
               'says so first')
    allow_other_results: bool = option(
        False, 'publish results that evaluated other weights than those published, or that do not record which '
               '(written before timm-advnorm-validate recorded a weights digest); the card then says so beside the '
               'numbers')
    template: Optional[str] = option(
        None, "model card template (default: the package's model_card_template.md)", dest='card_template',
        metavar='FILE')
    license: Optional[str] = option(
        None, "card license (default: the weights' pretrained config, e.g. a converted release's license)")


@dataclass(frozen=True)
class PublishOptions:
    """Everything a publication is told: what is exported, where it goes, and what its card states."""

    export: ExportOptions
    target: TargetOptions = field(default_factory=TargetOptions)
    card: CardOptions = field(default_factory=CardOptions)


#: The options classes whose fields declare the command's options, in the order of `PublishOptions`' groups.
OPTIONS_CLASSES = (ExportOptions, TargetOptions, CardOptions)
