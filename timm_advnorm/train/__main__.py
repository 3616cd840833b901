"""``python -m timm_advnorm.train``: adversarial training (see `timm_advnorm.commands.train`)."""
import sys

from ..commands.train import run

if __name__ == '__main__':
    sys.exit(run('python -m timm_advnorm.train'))
