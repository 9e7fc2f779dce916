"""What a run leaves behind, queryable and verifiable: its DuckDB catalog and its checkpoints' lineage.

catalog.py ingests every rollout, reward and co-evolver event of a run into one DuckDB file, and
query_cli.py is `coevo query` over it; lineage.py records in each checkpoint what it was made from
(parent, rollouts, rewards, co-evolver, data, params, code) and checks those hashes again, with
`coevo lineage` in lineage_cli.py; tables.py reads a run's validated tables once per content hash.
"""
