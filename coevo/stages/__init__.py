"""The stages of one iteration as path-in, path-out functions, one module per stage.

Each stage reads its inputs from disk, computes, writes its outputs atomically and returns a small
record of output paths, content hashes and metrics. The plain driver (coevo/driver.py) and the
Prefect tasks (tasks/stages.py) call exactly these functions, so a stage re-run from its inputs (a
resumed flow) reproduces its outputs: every stage's randomness is derived from (seed, iteration, stage).

  prepare.py   the problem splits (`prepare_stage`); checkpoint 0 and co-evolver version 0 (`bootstrap_stage`)
  in_force.py  what an iteration runs under, resolved once at its start (`in_force`)
  rollout.py   the iteration's rollouts              verify.py  their rewards
  merge.py     the shards' tables as one             coevolve.py  co-evolver version k -> k+1
  update.py    checkpoint k -> k+1                   evaluate.py  a checkpoint's held-out accuracy
  retain.py    which checkpoints keep their weights  resume.py  where a run restarts
                                                                 (`latest_complete`, `remove_orphans`)

What the stages share lives below them, in the library: the run's file names (coevo/layout.py), its
validated tables (coevo/store/tables.py), the process's cached policy and the generation engine
serving it (coevo/model/cache.py `live_engine`: a persistent one, vLLM, lives across iterations,
sleeps during the update and is synced in place to the new checkpoint after it).
"""
