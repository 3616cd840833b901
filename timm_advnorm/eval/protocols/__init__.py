"""What an evaluation runs, as data: the named protocols (attacks, budgets, how they are reported), the
out-of-distribution sets they read and the one-line description of each attack. The lowest floor of `eval`."""
