"""Measuring credit against exact truth: how close each credit module comes to the right answer.

Beside `credit/` in the flow (credit -> measure -> benchmarks): it reads credit modules and
is read by the entry points, so `credit/` holds only what computes credit.

- `ground_truth`: the exact ground truth of a policy on a finite MDP -- each task's MDP on
  the run's reward channel and an LLM policy's exact action table (`exact_sources`, the
  source the exact-MDP credit modules are handed through `CreditContext.exact_sources`);
- `truth_metrics`: a module's credit against the truth (correlations with A(s, a),
  key-step sign agreement, the gradient direction it implies; COCOA, arXiv 2306.16803);
- `key_steps`: key-step scoring on labelled envs (the one AUROC, P@k; scripted
  trajectories);
- `pools`: trajectory pools of a policy on tasks whose truth is known, and module
  credits over their batches as a trainer would compute them;
- `prefetch`: every view a set of modules will score, scored once into a score memo (the
  memo, `models.scoring.ScoreMemo`, stays with the engine that consults it);
- `variants`: the hindsight ablation's variants as data; `ablation`: a variant's figures
  with paired bootstrap intervals;
- `decomposition`: a hindsight method's error split into formula and model (exact
  hindsight against the model's, and the model's hindsight calibration);
- `bootstrap`: the one bootstrap (percentile interval, paired resamples, block standard
  error) every measurement reports with.

The exact-MDP modules (`oracle`, `hca`, `credit.exact_source`) must not import this package
(a cycle). What they compute with is pure dynamic programming on `envs.mdp` with no model
or agent (`credit.policy_evaluation`, `credit.exact_hindsight`), so it stays in credit/;
what ties it to a run -- the LLM's exact table and each task's MDP built from the env --
is measured here and reaches them as `CreditContext.exact_sources`, set by the entry point.
"""
