"""From gathered records to what a user reads: the reported numbers (`summary`, `intervals`, `corruption_error`),
the sanity checks (`sanity`), the assembled `EvalResults` (`assemble`), and the files, console summary and plots
(`files`, `report`, `plots`). The top floor of `eval`."""
