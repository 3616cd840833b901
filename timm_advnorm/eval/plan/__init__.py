"""From a protocol to work and its cost: the functions evaluated (`variants`), the units of work per batch
(`stages`, `metrics`), their order (`stage_plan`), what they cost in passes of the model (`cost`) and the sanity
probes sized to that cost (`sanity_budget`). Above `protocols` and the results' `schema`."""
