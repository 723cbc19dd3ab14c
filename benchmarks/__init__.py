"""gangscale's benchmark suite: synthetic backlogs, faithful baselines, one evaluator.

Run it with `python -m benchmarks run` (or `gangscale bench run`); see
docs/benchmarks.md for the method and the results.
"""
