"""Building blocks of `train_adv.py`: its argument parser (and the argparse types of numeric options, which the
methods' own options use too), training epoch and per-epoch validation."""
