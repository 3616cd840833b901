"""``python -m timm_advnorm.study``: the ``timm-advnorm-study`` command."""
import sys

from .script import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.study'))
