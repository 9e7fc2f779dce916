"""Prefect tasks: thin adapters (read -> validate -> call coevo -> validate -> write -> log) over
coevo.rollout.stage, coevo.verification.stage, the co-evolver's update and coevo.update.stage."""
