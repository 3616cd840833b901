"""What a publication is told, as typed, frozen options: built once from the command line and read by `publish`.

``timm-advnorm-publish`` parses its arguments and converts them into one `PublishOptions`
(`timm_advnorm.commands.publish.publish_options`); `timm_advnorm.hub.publish.publish` never sees the parsed command
line. The options are grouped by what they decide: what is exported (`ExportOptions`), where it goes
(`TargetOptions`) and what the model card states besides the model's own facts (`CardOptions`). Publishing never
changes them: the inference branch it resolves from the checkpoint's record goes into a new object
(`dataclasses.replace`).
"""
from dataclasses import dataclass, field
from typing import Optional

__all__ = ['DEFAULT_COMMIT_MESSAGE', 'ExportOptions', 'TargetOptions', 'CardOptions', 'PublishOptions']

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

    checkpoint: str
    model: Optional[str] = None
    ema: bool = False
    branch: Optional[str] = None
    inference_branch: Optional[str] = None


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

    repo_id: Optional[str] = None
    local_dir: Optional[str] = None
    dry_run: bool = False
    overwrite: bool = False
    private: bool = False
    revision: Optional[str] = None
    commit_message: str = DEFAULT_COMMIT_MESSAGE

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

    results: Optional[str] = None
    allow_reduced_results: bool = False
    allow_other_results: bool = False
    template: Optional[str] = None
    license: Optional[str] = None


@dataclass(frozen=True)
class PublishOptions:
    """Everything a publication is told: what is exported, where it goes, and what its card states."""

    export: ExportOptions
    target: TargetOptions = field(default_factory=TargetOptions)
    card: CardOptions = field(default_factory=CardOptions)
