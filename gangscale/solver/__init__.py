"""The solver: problem reduction, greedy hint, packing patterns, CP-SAT model, lower bound.

Invariant: nothing here imports Kubernetes, boto3, the controller, the cloud adapters or
the scheduler model. Importing OR-Tools' `cp_model` also imports pandas (a few hundred
ms); commands that never solve (`check`, `dump`, `run`'s parser, `bench`) do not import
this package at all: `gangscale/cli.py` imports the planner only inside `plan`.
"""
