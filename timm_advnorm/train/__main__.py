"""``python -m timm_advnorm.train``: adversarial training (see `timm_advnorm.train.script`)."""
import sys

from .script import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.train'))
