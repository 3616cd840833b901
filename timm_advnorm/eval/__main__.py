"""``python -m timm_advnorm.eval``: robust evaluation (see `timm_advnorm.commands.validate`)."""
import sys

from ..commands.validate import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.eval'))
