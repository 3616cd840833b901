"""The package's console commands, one module each: its parser, its usage checks and its ``main``/``run``/
``console_main``. This is the only layer that parses arguments; what a command runs lives below it (`train`, `eval`,
`hub`, `convert`, `augment`, `study`).

* `train`: ``timm-advnorm-train`` (``train_adv.py``, ``python -m timm_advnorm.train``);
* `validate`: ``timm-advnorm-validate`` (``validate_adv.py``, ``python -m timm_advnorm.eval``);
* `publish`: ``timm-advnorm-publish`` (``hub/publish.py``);
* `convert`: ``timm-advnorm-convert`` (``python -m timm_advnorm.convert``);
* `deepaugment`: ``timm-advnorm-deepaugment``;
* `study`: ``timm-advnorm-study`` (``python -m timm_advnorm.study``); `study_cells` gives the studies the training
  and evaluation commands their cells run;
* `demo`: ``timm-advnorm-demo`` (``bash scripts/demo.sh``): the README's digits demo, through the commands above.

`parser` holds what they share (the parser class, ``-c`` YAML layering, hidden aliases, `run_cli`) and `options`
the options several of them take, each defined once.
"""
