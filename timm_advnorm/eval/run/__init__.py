"""Running a plan: building the evaluation from its options (`build`), the seeded and named subsets (`data`,
`subsets`), the resumable loop (`evaluator`, `state`, `records`), sharding under torchrun (`distributed`,
`runner`) and the BN statistics a mixture-BN model is probed for (`bn_stats`). Above `plan`."""
