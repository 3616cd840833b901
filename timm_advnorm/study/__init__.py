"""Paper studies: each seed paper's comparison grid as one resumable command (``timm-advnorm-study``).

A study (`spec`) is a declarative grid shipped as YAML in ``timm_advnorm/studies/``; its cells (`cells`) are
ordinary ``timm-advnorm-train`` runs and ``timm-advnorm-validate`` evaluations, run resumably (`runner`), and its
results are pooled over seeds into the paper's findings (`table`) and figure (`plot`). What a run is told, and
the two commands it drives, are given to it as typed options and callables (`options`).
"""
from .cells import Cell, expand_cells
from .options import CellCommands, StudyOptions
from .runner import cell_state, run_cell, run_cells
from .spec import StudySpec, list_studies, load_study

__all__ = ['Cell', 'CellCommands', 'StudyOptions', 'StudySpec', 'cell_state', 'expand_cells', 'list_studies',
           'load_study', 'run_cell', 'run_cells']
