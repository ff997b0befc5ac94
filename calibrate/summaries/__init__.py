"""Run summaries -> a Scenario, by simulation-based inference.

Many users have no traces, only what gepa or their logs report per run:
wall-clock, iterations, metric calls, how many iterations ran full
validation, accepted proposals, dollars, scores, with the run's shape and
setup (W, B, V, b). reading.py reads them into facts.py's facts, priors.py says
what is believed before, abc_smc.py is the sampler (its distance, its runs and its
moves) and infer.py runs the simulator as its likelihood.
This docstring is the summaries file's reference (`pydoc
pxn.calibrate.summaries`); experiments/paper/*.summaries.toml are worked
examples.

TOML: a [setup] table (budget, valset_size, workers; optionally
trainset_size, minibatch, reflection_concurrency, task_model,
reflection_model, and what a score is: metric = binary, graded or
continuous, levels = L for a graded one), one [[runs]] table per run (its
shape and facts; any setup key overrides [setup]), an optional [sweep] table
of statements about a sweep of shapes each run once, optional [priors] and
[inference]:

    [sweep]
    shapes = ["single", "2x2", "4x4"]   # single is needed for speedups
    most_speedup_at_least = 2.0  # more than half the batched runs were this much faster
    fastest_speedup = [3.0, 4.0] # the fastest batched run's speedup over single
    dollars = [12.0, 16.0]       # every run of the sweep cost within this

    [priors]                     # over priors.py's defaults
    "reflection.scale" = { lognormal = [6.5, 0.2] }  # or loguniform/uniform = [low, high]
    "acceptance.correlation" = 0.0                    # a number: held fixed

    [inference]                  # the defaults
    seed = 0
    particles = 400
    draws = 100                  # posterior draws written as [uncertainty]
    min_acceptance = 0.05
    max_generations = 20

A sweep's single (or batched) run is the [[runs]] entry of that shape on the
[setup], when there is one: the same run, read by both.

CSV: one row per run with the columns shape, budget, valset_size, workers
(trainset_size, minibatch, reflection_concurrency, task_model,
reflection_model, metric, levels optional) and any fact columns; a range is
written "low..high".

Fact columns: wall_clock (seconds; or wall_clock_minutes, wall_clock_hours),
iterations, metric_calls, full_val_iterations, full_val_share, accepted,
dollars; and the search's scores: seed_score (the seed's mean validation
score), best_score (the best mean validation score, optimistic: chosen on
those examples), test_score (the returned candidate's score on a held-out
test set, with test_examples its size), acceptance, skip_share, val_gain,
example_spread, repeat_agreement (as pxn.run_summary.RunSummary reads them off a
trace). Any score fact has the search inferred as the quality model
(pxn.quality), else as acceptance rates. Every fact is at least 0. Values no
run of gepa can have (iterations above metric calls, a score or share above
1, fewer metric calls than the budget gepa stops at) are refused before any
simulation.
"""
