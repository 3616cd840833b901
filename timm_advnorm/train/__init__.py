"""Building blocks of `train_adv.py`: its argument parser, training epoch and per-epoch validation."""
