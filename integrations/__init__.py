"""Adapters to the trainers people already use (docs/integrations.md).

`integrations.trl_env`: any registered creditgym environment as a `trl.GRPOTrainer`
`environment_factory`. `integrations.verl_credit`: creditgym credit modules as verl
advantage estimators. Each imports its library, so each needs its extra installed
(`pip install -e .[trl]`, `.[verl]`); importing this package imports neither.
"""
