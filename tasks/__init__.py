"""Prefect tasks: thin adapters (read -> validate -> call coevo -> validate -> write -> log) over
coevo.rollout, coevo.verify, the co-evolver's update and coevo.policy.update."""
