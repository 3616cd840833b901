"""Building blocks of `train_adv.py`: its argument parser (`args`), the run built from it (`build`, its checks in
`checks`), the epoch loop that runs it (`runner`, its folder in `run_folder`), and the training epoch and per-epoch
validation (`loop`)."""
