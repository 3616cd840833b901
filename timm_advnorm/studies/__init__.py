"""The paper studies shipped with the package: one YAML grid per seed paper (``timm-advnorm-study NAME``; the format
is `timm_advnorm.study.spec`'s)."""
