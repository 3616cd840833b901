"""Shared fixtures: a session-wide rendered digits dataset and offline defaults."""
import os
from pathlib import Path

import pytest

os.environ.setdefault('HF_HUB_OFFLINE', '1')


@pytest.fixture(scope='session')
def digits_dir(tmp_path_factory) -> Path:
    """Folder to pass as ``--data-dir`` for ``--dataset digits``; rendered once per session."""
    from timm_advnorm.data import resolve_dataset
    data_dir = tmp_path_factory.mktemp('digits')
    resolve_dataset('digits', str(data_dir), img_size=32)
    return data_dir
