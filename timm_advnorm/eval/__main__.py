"""``python -m timm_advnorm.eval``: robust evaluation (see `timm_advnorm.eval.script`)."""
import sys

from .script import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.eval'))
