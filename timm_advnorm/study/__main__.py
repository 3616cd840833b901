"""``python -m timm_advnorm.study``: the ``timm-advnorm-study`` command (`timm_advnorm.commands.study`)."""
import sys

from ..commands.study import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.study'))
