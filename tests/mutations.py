"""The mutation check: behaviours broken on purpose, each caught by a named test.

Every entry of MUTATIONS names a file, an exact text in it (found exactly once), its replacement (the
break), and the tests that must fail with the break in place. The check copies the repository's
files (tracked and untracked-but-not-ignored) to a temporary directory, applies one break there, runs
the named tests with pytest, and reports CAUGHT (they failed), MISSED (they passed: the test no longer
guards the behaviour) or STALE (the text to replace is no longer there: update the entry). The working
tree is never touched.

Not part of the default pytest run (each entry runs real tiny trainings: minutes in all). Run it from
the repository root:

    python -m tests.mutations            # every entry
    python -m tests.mutations -k chat    # entries whose name contains "chat"
    python -m tests.mutations --list     # names only

Exit status 0 when every selected entry is CAUGHT, 1 otherwise. Add an entry whenever a test is
written or strengthened to guard a mechanism that could be disconnected with the suite still green.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    find: str  # exact text, present exactly once
    replace: str
    tests: tuple[str, ...]  # pytest node ids that must fail with the break in place


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "verification-ignores-the-bank-in-force",
        "coevo/stages/verify.py",
        "cure_frame(frame, training_split(now), tests_in_force(cfg, now), now.cfg)",
        "cure_frame(frame, training_split(now), lambda problem_id: [], now.cfg)",
        ("tests/code/test_cure_run.py::test_the_bank_in_force_joins_the_pass_table_of_the_verification_stage",),
    ),
    Mutation(
        "role-instruction-ignored-by-the-renderer",
        "coevo/rollout/prompting.py",
        '        kind = problem.get(ROLE_INSTRUCTION) or ("code" if code else "math")',
        '        kind = "code" if code else "math"',
        (
            "tests/test_prompting.py::test_the_tester_role_is_asked_with_its_own_instruction_and_its_test_read_from_the_reply",
        ),
    ),
    Mutation(
        "roles-never-checked-against-the-problems",
        "coevo/stages/prepare.py",
        '    check_roles(train, cfg.rollout.roles, str(paths["train"]))',
        "    pass",
        ("tests/code/test_cure_run.py::test_a_role_the_problems_cannot_serve_is_refused_before_training",),
    ),
    Mutation(
        "zero-variance-share-pools-the-roles",
        "coevo/update/objectives/group_signal.py",
        'for _, rows in rollouts.groupby("role", sort=True)]',
        "for rows in [rollouts]]",
        ("tests/coevolvers/test_curriculum.py::test_zero_variance_share_counts_constant_groups",),
    ),
    Mutation(
        "update-trains-every-role",
        "coevo/update/stage.py",
        '    joined = joined[joined["role"].isin(cfg.trained_roles)]',
        "    joined = joined",
        ("tests/code/test_cure_run.py::test_the_update_trains_the_roles_train_roles_lists",),
    ),
    Mutation(
        "one-group-per-problem-across-roles",
        "coevo/update/stage.py",
        'joined.groupby(["problem_id", "role"], sort=True)]',
        'joined.groupby("problem_id", sort=True)]',
        ("tests/code/test_cure_run.py::test_the_update_trains_the_roles_train_roles_lists",),
    ),
    Mutation(
        "generated-truth-reads-the-hidden-tests",
        "coevo/code/execution.py",
        '        judge = table.truth if cfg.code.cure.truth == "hidden" else consensus_truth(table)\n',
        "        judge = table.truth\n",
        ("tests/code/test_cure_run.py::test_generated_truth_reads_no_ground_truth_test",),
    ),
    Mutation(
        "tester-asked-the-solver-prompt",
        "coevo/rollout/roles.py",
        '        lambda row: {**row, "prompt": tester_prompt(row["prompt"]), ROLE_INSTRUCTION: "tester"},\n',
        "        dict,\n",
        ("tests/code/test_cure_run.py::test_both_roles_are_sampled_rewarded_and_trained_a_group_per_problem_and_role",),
    ),
    Mutation(
        "bank-never-retires",
        "coevo/coevolvers/unit_tests.py",
        '                if role == SOLVER and fact.get("correct") == "1"\n',
        "                if False\n",
        ("tests/code/test_unit_test_bank.py::test_admits_only_accurate_decidable_discriminating_tests",),
    ),
    Mutation(
        "checkpoint-copies-hard-link",
        "coevo/model/checkpoint.py",
        "        clone_file(source, target / name)\n",
        "        os.link(source, target / name)\n",
        (
            "tests/model/test_shared_bytes.py::"
            "test_in_place_write_into_the_newest_checkpoint_leaves_older_ones_and_the_users_model_intact",
        ),
    ),
    Mutation(
        "bootstrap-hard-links-user-weights",
        "coevo/model/checkpoint.py",
        "                clone_file(weights_from, tmp / WEIGHTS)\n",
        "                os.link(weights_from, tmp / WEIGHTS)\n",
        ("tests/model/test_bootstrap.py::test_user_weights_are_copied_and_never_written_through",),
    ),
    Mutation(
        "child-vouches-for-unchecked-parent",
        "coevo/model/checkpoint.py",
        "        if name in expected and hash_file(target / name) != expected[name]:\n",
        "        if False:\n",
        ("tests/model/test_shared_bytes.py::test_a_damaged_parent_is_named_and_never_copied_forward",),
    ),
    Mutation(
        "bootstrap-checks-weights-only",
        "coevo/stages/prepare.py",
        '    damaged = damaged_files(cfg.bootstrap_dir) if meta.get("bootstrap_key") == key else []\n',
        '    damaged = [n for n in damaged_files(cfg.bootstrap_dir) if n == "model.safetensors"]\n',
        ("tests/model/test_shared_bytes.py::test_a_damaged_bootstrap_is_made_again_and_no_child_vouches_for_it",),
    ),
    Mutation(
        "resume-trusts-the-bootstrap",
        "coevo/stages/resume.py",
        "    if k == 0 and (damaged := damaged_files(layout.checkpoint(0))):",
        "    if k < 0 and (damaged := damaged_files(layout.checkpoint(0))):",
        ("tests/model/test_shared_bytes.py::test_resume_checks_the_bootstrap_like_every_checkpoint",),
    ),
    Mutation(
        "bootstrap-trusts-imported-source",
        "coevo/model/bootstrap.py",
        "        check_source(cfg.policy.checkpoint)\n",
        "",
        (
            "tests/model/test_import_model.py::"
            "test_a_source_that_no_longer_matches_its_import_record_is_not_bootstrapped",
        ),
    ),
    Mutation(
        "warm-started-start-never-checked",
        "coevo/stages/prepare.py",
        '    check_unseen_by_start(cfg, {name: path for name, path in paths.items() if name != "train"})\n',
        "",
        (
            "tests/model/test_tool_warm_start.py::"
            "test_a_run_is_refused_held_out_problems_its_starting_checkpoint_was_warm_started_on",
        ),
    ),
    Mutation(
        "warm-start-record-not-carried",
        "coevo/model/bootstrap.py",
        "        trained_on |= set(read_meta(cfg.policy.checkpoint).get(TRAINED_ON, []))\n",
        "",
        (
            "tests/model/test_tool_warm_start.py::"
            "test_a_run_is_refused_held_out_problems_its_starting_checkpoint_was_warm_started_on",
        ),
    ),
    Mutation(
        "orphan-temporaries-kept",
        "coevo/loop.py",
        "    remove_orphans(cfg)  # temporary directories",
        "    (cfg)  # temporary directories",
        ("tests/model/test_shared_bytes.py::test_orphan_temporary_directories_are_removed_at_the_next_start",),
    ),
    Mutation(
        "publish-before-fsync",
        "coevo/io.py",
        "            fsync_tree(target)\n",
        "",
        (
            "tests/test_durable.py::test_a_published_checkpoint_and_record_were_fsynced_before_and_after_their_rename",
            "tests/test_durable.py::test_fsync_calls_are_counted_per_publish",
        ),
    ),
    Mutation(
        "rename-not-synced",
        "coevo/io.py",
        "        fsync_path(final.parent)\n",
        "",
        ("tests/test_durable.py::test_a_published_checkpoint_and_record_were_fsynced_before_and_after_their_rename",),
    ),
    Mutation(
        "export-replaces-any-out",
        "coevo/model/export.py",
        "    check_out(checkpoint, out)\n",
        "",
        ("tests/model/test_export.py::test_export_onto_a_checkpoint_or_run_is_refused_and_changes_nothing",),
    ),
    Mutation(
        "import-force-replaces-a-checkpoint",
        "coevo/model/import_model.py",
        "    why = protected_output(out_dir)\n",
        "    why = None\n",
        ("tests/model/test_import_model.py::test_an_existing_model_checkpoint_or_run_is_never_replaced",),
    ),
    Mutation(
        "sandbox-sigxcpu-not-a-timeout",
        "coevo/sandbox/supervisor.py",
        "        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_s - CPU_SLACK_S):",
        "        if sig == signal.SIGKILL and cpu >= cpu_s - CPU_SLACK_S:",
        ("tests/sandbox/test_load.py::test_a_loop_past_its_cpu_limit_is_a_timeout_beside_two_busy_loops[rlimits]",),
    ),
    Mutation(
        "sandbox-verdict-on-wall-clock",
        "coevo/sandbox/supervisor.py",
        "    WORKER.deadline = time.monotonic() + WALL_FACTOR * per_test_s + 1\n",
        "    WORKER.deadline = time.monotonic() + 0.01\n",
        (
            "tests/sandbox/test_load.py::test_an_honest_program_stays_passed_beside_two_busy_loops[rlimits]",
            "tests/sandbox/test_load.py::test_an_honest_program_stays_passed_beside_two_busy_loops[namespaces]",
        ),
    ),
    Mutation(
        "async-rewards-on-the-notebooks-loop",
        "coevo/verification/reward_calls.py",
        "        asyncio.get_running_loop()\n",
        "        raise RuntimeError\n",
        ("tests/test_reward_calls.py::test_async_rewards_run_together_inside_a_running_event_loop",),
    ),
    Mutation(
        "async-rewards-one-after-another",
        "coevo/verification/reward_calls.py",
        "        return await asyncio.gather(*(function(**args) for function in functions), return_exceptions=True)",
        "        return [await function(**args) for function in functions]",
        ("tests/test_reward_calls.py::test_async_rewards_run_together_inside_a_running_event_loop",),
    ),
    Mutation(
        "cli-train-json-prints-the-whole-summary",
        "coevo/cli.py",
        '        print_json(out["json"])  # coevo.train() returns the same object',
        '        print_json(out["summary"])  # coevo.train() returns the same object',
        ("tests/test_api.py::test_notebook_trains_evaluates_and_verifies_lineage",),
    ),
    Mutation(
        "cli-eval-json-prints-the-metrics-only",
        "coevo/cli.py",
        "        print_json(result)\n        return\n    console.print(metrics_table(",
        "        print_json(result['metrics'])\n        return\n    console.print(metrics_table(",
        ("tests/test_api.py::test_notebook_trains_evaluates_and_verifies_lineage",),
    ),
    Mutation(
        "flow-trusts-its-cached-bootstrap",
        "flows/train.py",
        "        if damaged_files(boot.checkpoint.path):  # a cached result",
        "        if False:  # a cached result",
        ("tests/model/test_shared_bytes.py::test_the_flow_remakes_a_damaged_bootstrap_its_cache_points_at",),
    ),
    Mutation(
        "chat-update-renders-plain",
        "coevo/update/stage.py",
        "renderer = renderer_for(cfg, policy.tokenizer)  # the engine's rendering",
        (
            'renderer = renderer_for(cfg.model_copy(update={"prompt": cfg.prompt.model_copy(update={"format": '
            '"plain"})}), policy.tokenizer)  # the engine\'s rendering'
        ),
        ("tests/test_prompting.py::test_tiny_run_under_chat_trains_on_the_exact_templated_tokens",),
    ),
    Mutation(
        "rollouts-ignore-harness-temperature",
        "coevo/stages/rollout.py",
        "return run_rollouts(engine, variants, problems, now.cfg, it, policy_version(checkpoint), stage)",
        (
            'return run_rollouts(engine, variants, problems, now.cfg.model_copy(update={"sampling": cfg.sampling}), '
            "it, policy_version(checkpoint), stage)"
        ),
        (
            "tests/coevolvers/test_harness.py::test_a_run_with_a_collapsing_temperature_is_diagnosed_backtested_and_fixed",
        ),
    ),
    Mutation(
        "curriculum-choose-replaced-by-uniform",
        "coevo/stages/in_force.py",
        "batch = choose_batch(evolver, split, candidate_count(cfg.rollout, len(split)), it, cfg.seed)",
        (
            'batch = __import__("coevo.coevolvers.base", fromlist=["uniform_batch"]).uniform_batch(split, '
            "candidate_count(cfg.rollout, len(split)), cfg.seed, it)"
        ),
        ("tests/coevolvers/test_list.py::test_a_run_with_two_coevolvers_records_both_versions_in_the_lineage",),
    ),
    Mutation(
        "list-context-role-ignored",
        "coevo/coevolvers/composite.py",
        'planner = self.player["context"]',
        "planner = None",
        ("tests/coevolvers/test_list.py::test_a_run_with_two_coevolvers_records_both_versions_in_the_lineage",),
    ),
    Mutation(
        "curriculum-value-curves-not-logged",
        "coevo/stages/coevolve.py",
        "metrics = {**metrics, **member.choice_metrics(member_report)}",
        "pass",
        ("tests/coevolvers/test_curriculum.py::test_plain_driver_runs_curriculum",),
    ),
    Mutation(
        "proposer-promotes-into-a-cell-training-has",
        "coevo/problems/proposer.py",
        'present = set(zip(stats["family"], stats["level"].astype(int))) | set(trained)',
        'present = set(zip(stats["family"], stats["level"].astype(int)))',
        (
            "tests/problems/test_proposer.py::"
            "test_a_cell_training_already_has_is_not_promoted_into_or_started_because_the_batch_missed_it",
        ),
    ),
    Mutation(
        "validation-gets-what-test-leaves",
        "coevo/problems/arithmetic.py",
        'if val_split == "after_test":',
        "if True:",
        (
            "tests/problems/test_arithmetic.py::"
            "test_validation_covers_every_cell_test_covers_where_test_would_empty_the_small_ones",
            "tests/compare/test_spec.py::"
            "test_a_validation_split_keeps_the_earlier_identity_only_where_it_splits_as_runs_before_it_did",
        ),
    ),
    Mutation(
        "identity-drops-a-validation-split-that-splits-otherwise",
        "coevo/compare/spec.py",
        "if by_rule[0] != by_rule[1]:",
        "if False:",
        (
            "tests/compare/test_spec.py::"
            "test_a_validation_split_keeps_the_earlier_identity_only_where_it_splits_as_runs_before_it_did",
        ),
    ),
    Mutation(
        "identity-forgets-the-removed-drop-below",
        "coevo/compare/spec.py",
        '        entry["curriculum"]["proposer"]["drop_below"] = 0.05\n',
        "        pass\n",
        (
            "tests/compare/test_spec.py::"
            "test_a_removed_setting_is_read_from_earlier_runs_and_put_back_in_their_identity",
        ),
    ),
    Mutation(
        "proposer-may-repeat-validation",
        "coevo/store/tables.py",
        "    return problems(test) if val is None else pd.concat([problems(test), problems(val)], ignore_index=True)",
        "    return problems(test)",
        ("tests/coevolvers/test_curriculum.py::test_proposer_grows_the_training_split_the_stages_draw_from",),
    ),
    Mutation(
        "prepare-ignores-problems-val-split",
        "coevo/prepare.py",
        "            problems.val_split,\n",
        "",
        ("tests/test_examples.py::test_the_curriculum_example_is_the_measured_arm",),
    ),
    Mutation(
        "compare-records-drop-the-validation-verdicts",
        "coevo/compare/runs.py",
        'if "val_verdicts" in record:',
        "if False:",
        (
            "tests/compare/test_compare_cli.py::"
            "test_killed_comparison_reruns_restoring_finished_arm_runs_and_reports_intervals",
        ),
    ),
    Mutation(
        "evaluation-keeps-no-validation-verdicts",
        "coevo/stages/evaluate.py",
        'metrics.update(validate(engine, problems(val), asked, record["val_verdicts"]))',
        "metrics.update(validate(engine, problems(val), asked))",
        ("tests/compare/test_verdicts.py::test_evaluation_record_holds_the_greedy_verdict_of_every_evaluated_problem",),
    ),
    Mutation(
        "compare-pairs-validation-at-the-last-evaluation",
        "coevo/compare/table.py",
        '(name, s): readout(spec, cells[(name, s)]["record"]["curve"], seconds)',
        '(name, s): cells[(name, s)]["record"]["curve"][-1]',
        (
            "tests/compare/test_table.py::"
            "test_validation_is_paired_at_the_same_readouts_as_the_test_split_and_only_where_every_run_kept_it",
        ),
    ),
    Mutation(
        "compare-rotates-arms-by-the-sittings-seeds",
        "coevo/compare/results.py",
        "names[(spec.seeds.index(seed) + j) % len(names)]",
        "names[(seeds.index(seed) + j) % len(names)]",
        (
            "tests/compare/test_table.py::"
            "test_arms_take_turns_going_first_by_the_seeds_place_in_the_spec_whatever_the_sitting_runs",
        ),
    ),
    Mutation(
        "compare-reads-an-unreached-budget-at-each-runs-last-evaluation",
        "coevo/compare/table.py",
        'return min([spec.train_seconds] + [train_seconds(m["record"]) for m in markers])',
        "return spec.train_seconds",
        (
            "tests/compare/test_table.py::"
            "test_a_budget_some_run_never_reached_reads_every_run_at_the_smallest_runs_total",
        ),
    ),
    Mutation(
        "harness-before-arm-reads-the-diagnosed-rollouts",
        "coevo/coevolvers/harness.py",
        "before = group_evidence(*rows_of(rollouts, rewards, held), train, limit)",
        "before = group_evidence(*rows_of(rollouts, rewards, diagnosed | held), train, limit)",
        (
            "tests/coevolvers/test_harness.py::"
            "test_the_before_arm_is_the_batchs_own_rollouts_on_the_half_the_diagnosis_did_not_read",
        ),
    ),
    Mutation(
        "sandbox-nonce-reaches-the-program",
        "coevo/sandbox/runner.py",
        '"report_fd": write_report,',
        '"report_fd": write_report, "nonce_too": nonce,',  # the nonce in the half the program's process is forked after
        ("tests/sandbox/test_spoofing.py::test_reading_the_nonce_forges_no_pass[rlimits-gc]",),
    ),
    Mutation(
        "sandbox-cpu-limit-end-not-read-from-the-program",
        "coevo/sandbox/supervisor.py",
        "if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_s - CPU_SLACK_S):",
        "if False:",
        ("tests/sandbox/test_load.py::test_a_loop_past_its_cpu_limit_is_a_timeout_beside_two_busy_loops",),
    ),
    Mutation(
        "sandbox-mutated-arguments-not-copied-back",
        "coevo/sandbox/supervisor.py",
        '_copy_back(args, answer.get("back"))',
        '_copy_back((), answer.get("back"))',
        ("tests/sandbox/test_supervisor.py::test_ordinary_tests_keep_their_verdict[in-place mutation]",),
    ),
    Mutation(
        "mlflow-marker-in-its-own-transaction",
        "coevo/tracking/mlflow_tracker.py",
        "self.run_id, metrics=[*chunk, Metric(METRICS_MARKER, float(i), now, int(iteration))]",
        (
            "self.run_id, metrics=chunk\n                ) or self.client.log_batch(\n                    "
            "self.run_id, metrics=[Metric(METRICS_MARKER, float(i), now, int(iteration))]"
        ),
        ("tests/tracking/test_mlflow_tracker.py::test_a_kill_right_after_the_metrics_commit_logs_no_step_twice",),
    ),
    Mutation(
        "log-dataset-guard-removed",
        "coevo/tracking/mlflow_tracker.py",
        "if any(item.dataset.digest == digest for item in run.inputs.dataset_inputs):",
        "if False:",
        ("tests/tracking/test_mlflow_tracker.py::test_log_dataset_records_inputs_with_the_digest_once",),
    ),
    Mutation(
        "catalog-pass-rate-averages-problem-rates",
        "coevo/store/catalog.py",
        "sum(p.passed)::DOUBLE / sum(p.n)::DOUBLE AS pass_rate",
        "avg(p.passed::DOUBLE / p.n) AS pass_rate",
        ("tests/store/test_catalog.py::test_views_and_methods_answer_as_the_files_say",),
    ),
    Mutation(
        "catalog-skill-history-orders-events-by-name",
        "coevo/store/catalog.py",
        '" WHERE skill_id = ? ORDER BY iteration, event_rank(event), problem_id",',
        '" WHERE skill_id = ? ORDER BY iteration, event, problem_id",',
        ("tests/store/test_catalog.py::test_views_and_methods_answer_as_the_files_say",),
    ),
    Mutation(
        "params-yaml-error-without-its-position",
        "coevo/config/load.py",
        'where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)',
        "where = str(path)",
        ("tests/test_malformed_inputs.py::test_malformed_input[params-not-yaml]",),
    ),
    Mutation(
        "parquet-problems-error-without-arrows-reason",
        "coevo/problems/loader.py",
        'raise ProblemsFileError(f"{path}: cannot read parquet: {exc}") from exc',
        'raise ProblemsFileError(f"{path}: cannot read parquet: {type(exc).__name__}") from exc',
        ("tests/test_malformed_inputs.py::test_malformed_input[problems-unreadable-parquet]",),
    ),
    Mutation(
        "teacher-prompts-rendered-plain-under-chat",
        "coevo/update/stage.py",
        "    renderer = renderer_for(cfg, policy.tokenizer)\n    texts = ",
        (
            '    renderer = renderer_for(cfg.model_copy(update={"prompt": cfg.prompt.model_copy(update={"format": '
            '"plain"})}), policy.tokenizer)\n    texts = '
        ),
        ("tests/update/test_teacher.py::test_under_chat_the_teacher_prompts_are_templated_like_the_students",),
    ),
    Mutation(
        "restricted-self-distillation-sharded",
        "coevo/update/objectives/self_distill.py",
        'self.shardable = cfg.teacher.apply_to == "all"',
        "self.shardable = True",
        ("tests/update/test_distributed.py::test_objectives_with_minibatch_statistics_are_refused",),
    ),
    Mutation(
        "judge-shown-the-gold-check",
        "coevo/coevolvers/rubrics.py",
        'zip(rows["prompt"], completions, per_row)',
        'zip(rows["prompt"] + "\\n" + rows["answer"].astype(str), completions, per_row)',
        ("tests/coevolvers/test_rubrics.py::test_the_judge_sees_prompt_and_response_only_greedy_and_short",),
    ),
    Mutation(
        "judge-samples-long-replies",
        "coevo/verification/judge.py",
        'JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 16}',
        'JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 256}',
        ("tests/coevolvers/test_rubrics.py::test_the_judge_sees_prompt_and_response_only_greedy_and_short",),
    ),
    Mutation(
        "rollout-not-retried",
        "tasks/stages.py",
        "plain.update({t.name: t.with_options(**storage, **retrying) for t in (rollout, verify)})",
        (
            "plain.update({t.name: t.with_options(**storage, **(retrying if t is verify else {})) for t in (rollout, "
            "verify)})"
        ),
        ("tests/flows/test_retries.py::test_rollout_and_verification_retry_transient_faults_with_exponential_backoff",),
    ),
    Mutation(
        "lora-target-error-lists-every-module",
        "coevo/model/lora.py",
        "isinstance(m, torch.nn.Linear)",
        "isinstance(m, torch.nn.Module)",
        ("tests/model/test_lora.py::test_a_target_matching_no_module_stops_before_anything_is_written",),
    ),
    Mutation(
        "skill-bank-lifecycle-in-set-order",
        "coevo/coevolvers/skill_bank.py",
        "for sid in sorted(self.skills) if self.skills[sid].status in statuses]",
        "for sid in set(self.skills) if self.skills[sid].status in statuses]",
        ("tests/coevolvers/test_skill_bank.py::test_deterministic_across_processes_and_hash_seeds",),
    ),
    Mutation(
        "rubric-reward-judges-by-the-seed-rubric",
        "coevo/coevolvers/rubrics.py",
        "        evolver.rubric = rubric\n",
        "        rubric = evolver.rubric  # the seed rubric, not the saved version\n",
        ("tests/coevolvers/test_rubrics.py::test_rubrics_in_a_coevolver_list_play_the_reward_role",),
    ),
    Mutation(
        "flow-continue-restarts-the-metrics-log",
        "coevo/loop.py",
        "MetricsLog(cfg.run.out_dir, first)",
        "MetricsLog(cfg.run.out_dir, 1)",
        ("tests/flows/test_continue.py::test_cli_continue_numbers_after_the_newest_complete_iteration",),
    ),
    Mutation(
        "flow-ignores-the-time-budget",
        "coevo/loop.py",
        "stop = over_time_budget(cfg, started) and it < last",
        "stop = False",
        ("tests/flows/test_time_budget.py::test_a_spent_time_budget_stops_after_the_iteration_and_says_so[flow]",),
    ),
    Mutation(
        "time-budget-stop-leaves-its-iteration-unevaluated",
        "coevo/loop.py",
        "                if not evaluated:\n                    metrics.update(runner.evaluate(at, now, data))",
        "                if False:\n                    metrics.update(runner.evaluate(at, now, data))",
        ("tests/flows/test_loop_runners.py::test_a_spent_time_budget_stops_both_runners_alike",),
    ),
    Mutation(
        "flow-keeps-a-damaged-cached-update",
        "flows/train.py",
        "        if it > self.resume_from and (",
        "        if False and it > self.resume_from and (",
        ("tests/test_faults_disk.py::test_flow_rerun_remakes_a_damaged_checkpoint_and_shards_its_cache_points_at",),
    ),
    Mutation(
        "vllm-ignores-engine-cpu-threads",
        "coevo/rollout/engines/vllm.py",
        "            if self.config.cpu_threads:  # read when",
        "            if False:  # read when",
        ("tests/rollout/test_vllm.py::test_the_forward_runs_on_the_cores_engine_cpu_threads_names",),
    ),
    Mutation(
        "compare-interval-nested-bootstrap",
        "coevo/compare/stats.py",
        "    return t_interval(np.array([float(e.mean()) for e in per_seed]))",
        "    return {'ci95': _percentiles(nested_draws(per_seed, DRAWS, 0))}",
        (
            "tests/compare/test_coverage.py::test_the_headline_interval_excludes_zero_in_at_most_6_5_percent_of_null_"
            "experiments[3]",
        ),
    ),
    Mutation(
        "compare-per-seed-interval-unpaired",
        "coevo/compare/stats.py",
        "        paired=True,",
        "        paired=False,",
        ("tests/compare/test_stats.py::test_the_per_seed_interval_resamples_problems_paired",),
    ),
    Mutation(
        "check-unseen-skips-validation",
        "coevo/problems/heldout.py",
        '    pairs = [("train", "val"), ("train", "test"), ("val", "test")]',
        '    pairs = [("train", "test")]',
        ("tests/problems/test_heldout.py::test_the_library_check_covers_validation_against_train_and_against_test",),
    ),
    Mutation(
        "prefix-group-never-shares",
        "coevo/update/prefix.py",
        '    return mode != "none"',
        '    return mode == "minibatch"',
        (
            "tests/update/test_prefix.py::test_sharing_modes_encode_each_groups_prompt_once_and_none_encodes_every_row"
            "[group-3]",
        ),
    ),
    Mutation(
        "dynamic-sampling-trains-every-drawn-group",
        "coevo/update/steps.py",
        "        frame, scored = kept_rows(frame, scored, cfg.rollout.problems_per_iter, ds.gate)\n",
        "",
        (
            "tests/rollout/test_dynamic.py::test_a_tiny_run_samples_rounds_from_the_chooser_and_trains_only_the_kept_groups",
        ),
    ),
    Mutation(
        "dynamic-sampling-draws-one-round",
        "coevo/rollout/dynamic.py",
        "    rounds = 1 + (ds.max_rounds if ds.enabled else 0)",
        "    rounds = 1",
        (
            "tests/rollout/test_dynamic.py::test_a_tiny_run_samples_rounds_from_the_chooser_and_trains_only_the_kept_groups",
        ),
    ),
    Mutation(
        "identity-counts-dynamic-sampling-off-as-new",
        "coevo/compare/spec.py",
        '    if params["rollout"].get("dynamic_sampling", {}).get("enabled", False):',
        "    if True:",
        ("tests/compare/test_spec.py::test_dynamic_sampling_keeps_the_earlier_identity_only_where_it_is_off",),
    ),
    Mutation(
        "query-unknown-id-prints-no-rows",
        "coevo/store/query_cli.py",
        "    if wanted in known:\n        return\n",
        "    if True:\n        return\n",
        ("tests/store/test_query_cli.py::test_an_unknown_problem_id_is_an_error_naming_the_ids",),
    ),
    Mutation(
        "query-plain-run-says-only-no-catalog",
        "coevo/store/query_cli.py",
        '    if (run / "metrics.jsonl").is_file() or (run / "summary.json").is_file():',
        "    if False:",
        ("tests/store/test_query_cli.py::test_a_plain_run_says_it_keeps_no_catalog",),
    ),
    Mutation(
        "eval-latest-before-a-run-loads-nothing",
        "coevo/api.py",
        '    if str(checkpoint) == "latest" and not path.is_dir():',
        "    if False:",
        ("tests/test_cli.py::test_eval_latest_before_any_run_says_which_command_makes_one",),
    ),
    Mutation(
        "coevo-eval-samples-with-params-seed",
        "coevo/api.py",
        '        seed = eval_seed(cfg.seed, int(read_meta(path).get("iteration") or 0))',
        "        seed = cfg.seed",
        ("tests/test_cli.py::test_one_checkpoint_gets_one_pass_at_k_in_training_and_in_coevo_eval",),
    ),
    Mutation(
        "bootstrap-steps-report-no-progress",
        "coevo/model/supervised.py",
        '        progress.update("warm-start steps", step, last, loss=loss_value)\n',
        "",
        ("tests/test_progress.py::test_the_bootstrap_and_every_stage_report_progress_while_they_run",),
    ),
    Mutation(
        "stages-report-no-progress",
        "coevo/loop.py",
        '        with progress.task(f"{self.label}{name}"):\n            yield\n',
        "        yield\n",
        ("tests/test_progress.py::test_the_bootstrap_and_every_stage_report_progress_while_they_run",),
    ),
    Mutation(
        "json-train-shows-progress",
        "coevo/cli_support.py",
        "    with progress.shown_on(console, quiet=as_json), progress.task(name):",
        "    with progress.shown_on(console, quiet=False), progress.task(name):",
        ("tests/test_progress.py::test_no_progress_under_json_nor_in_the_python_api",),
    ),
    Mutation(
        "learning-curve-families-on-the-default-cycle",
        "coevo/tracking/plots.py",
        'color=next(palette), linestyle="--"',
        'linestyle="--"',
        ("tests/tracking/test_plots.py::test_every_series_has_its_own_colour_however_many_families",),
    ),
    Mutation(
        "site-without-the-benchmark-figures",
        "docs/hooks/figures.py",
        "    return _FIGURE_LINK.sub(site_link, markdown)",
        "    return markdown",
        ("tests/test_docs.py::test_site_builds_strict",),
    ),
    Mutation(
        "import-model-shows-no-steps",
        "coevo/model/import_model.py",
        '    with progress.task("converting the GGUF weights to float32"):\n        model, tokenizer',
        "    if True:\n        model, tokenizer",
        ("tests/test_progress.py::test_import_model_shows_its_steps",),
    ),
    Mutation(
        "evaluation-shows-no-sampling",
        "coevo/evaluation.py",
        '    with progress.task(f"{k} samples of each of {len(rows)} problems (pass@{k})"):',
        "    if True:",
        ("tests/test_progress.py::test_the_bootstrap_and_every_stage_report_progress_while_they_run",),
    ),
    Mutation(
        "compare-shows-no-arm-runs",
        "flows/compare.py",
        '            with progress.task(f"{arm} seed {seed} ({done + 1} of {len(todo)})"):',
        "            if True:",
        ("tests/compare/test_compare_cli.py::test_partial_result_sets_merge_into_the_complete_table",),
    ),
    Mutation(
        "dynamic-sampling-rounds-in-the-choosers-grouped-order",
        "coevo/stages/in_force.py",
        "        batch = shuffled(batch, cfg.seed, it)\n",
        "        batch = batch\n",
        (
            "tests/rollout/test_dynamic.py::"
            "test_the_curriculums_draw_is_sampled_in_a_shuffled_order_so_every_round_mixes_its_cells",
        ),
    ),
    Mutation(
        "position-keys-tasks-by-the-stage-records-metrics",
        "coevo/loop.py",
        "        return cls(Artifact(updated.path, updated.sha256), Artifact(evolved.path, evolved.sha256))",
        "        return cls(updated, evolved)",
        ("tests/flows/test_resume.py::test_continue_after_a_kill_restores_the_stages_the_partial_iteration_finished",),
    ),
    Mutation(
        "docs-command-names-a-missing-script",
        "docs/layout.md",
        "    .venv/bin/python bench/setting_path.py --out bench/results/setting-path.json",
        "    .venv/bin/python bench/settings_path.py --out bench/results/setting-path.json",
        ("tests/test_docs_commands.py::test_every_documented_command_parses_and_names_existing_paths",),
    ),
    Mutation(
        "docs-command-with-a-renamed-option",
        "docs/commands.md",
        "coevo train --plain            # the same stages in a plain loop",
        "coevo train --plane            # the same stages in a plain loop",
        ("tests/test_docs_commands.py::test_every_documented_command_parses_and_names_existing_paths",),
    ),
    Mutation(
        "identity-counts-an-episode-run-as-an-earlier-one",
        "coevo/compare/spec.py",
        "    if _runs_episodes(params):\n        return False\n",
        "",
        ("tests/compare/test_spec.py::test_episodes_keep_the_earlier_identity_only_where_no_episode_runs",),
    ),
    Mutation(
        "mismatch-measures-the-tool-turns",
        "coevo/update/stage.py",
        '    masks = list(measured["policy_mask"]) if "policy_mask" in measured else None\n',
        "    masks = None\n",
        ("tests/rollout/test_episodes.py::test_the_engine_mismatch_is_measured_on_policy_tokens_only",),
    ),
    Mutation(
        "update-renders-the-bare-prompt-without-the-tools",
        "coevo/update/stage.py",
        "    renderer = renderer_for(cfg, policy.tokenizer)  # the engine's rendering",
        '    renderer = renderer_for(cfg.model_copy(update={"tools": [], "environment": type(cfg.environment)()}), '
        "policy.tokenizer)  # the engine's rendering",
        ("tests/rollout/test_episodes.py::test_the_engine_mismatch_is_measured_on_policy_tokens_only",),
    ),
    Mutation(
        "lineage-never-checks-the-episode-sources",
        "coevo/store/lineage.py",
        '        *(("tool or environment", p) for p in record.get("episode_plugins", [])),\n',
        "",
        ("tests/rollout/test_episodes.py::test_the_lineage_reports_an_environment_source_edited_since",),
    ),
    Mutation(
        "episodes-allowed-with-the-plain-format",
        "coevo/config/tree.py",
        '        if self.prompt.format != "chat":\n',
        "        if False:\n",
        ("tests/rollout/test_episodes.py::test_episode_settings_that_cannot_work_are_refused",),
    ),
    Mutation(
        "rollouts-schema-ignores-the-mask-length",
        "schemas/rollouts.py",
        '        pa.Check(_mask_matches_completion, error="len(policy_mask) is neither 0 nor len(completion_ids)"),\n',
        "",
        ("tests/schemas/test_schemas.py::test_a_bad_episode_column_names_the_row_and_field",),
    ),
    Mutation(
        "rollouts-from-before-episodes-are-refused",
        "schemas/rollouts.py",
        "    return read_table(ROLLOUTS_SCHEMA, path, with_episode_columns)",
        "    return read_table(ROLLOUTS_SCHEMA, path)",
        ("tests/schemas/test_schemas.py::test_a_rollouts_table_from_before_episodes_reads_as_one_turn_samples",),
    ),
    Mutation(
        "rollouts-keep-no-episode-turns",
        "coevo/rollout/stage.py",
        '        "messages": json.dumps(generation.messages, ensure_ascii=False) if generation.messages else "",',
        '        "messages": "",',
        ("tests/rollout/test_episodes.py::test_the_rollouts_table_keeps_each_episode",),
    ),
    Mutation(
        "timed-out-environment-keeps-its-episode",
        "coevo/rollout/episodes.py",
        "    if last_turn or result.end_episode or over_budget:",
        "    if last_turn or over_budget:",
        ("tests/rollout/test_episodes.py::test_a_tool_that_raises_or_hangs_is_an_error_turn_and_the_episode_goes_on",),
    ),
    Mutation(
        "episode-prompts-show-no-tools",
        "coevo/rollout/episodes.py",
        "    renderer = renderer_for(cfg, with_prompt_format(engine, cfg).tokenizer)",
        "    renderer = prompt_renderer(cfg.prompt, with_prompt_format(engine, cfg).tokenizer)",
        ("tests/rollout/test_episodes.py::test_an_episode_calls_the_tool_reads_its_turn_and_answers",),
    ),
    Mutation(
        "episode-turns-seeded-by-the-call",
        "coevo/rollout/episodes.py",
        'derive_seed(seed, "turn", turn)',
        'derive_seed(seed, "turn", turn, id(episodes))',
        (
            "tests/rollout/test_episodes.py::test_sampled_episodes_are_seeded_and_the_same_twice",
            "tests/rollout/test_episodes.py::test_flow_and_driver_agree_on_an_episode_run_killed_between_turns",
        ),
    ),
    Mutation(
        "environment-observation-dropped",
        "coevo/rollout/episodes.py",
        '    shown = dict(row) if not observation else {**row, "prompt": f"{_question(row)}\\n\\n{observation}"}',
        "    shown = dict(row)",
        ("tests/rollout/test_episodes.py::test_an_environments_initial_observation_ends_the_user_turn",),
    ),
    Mutation(
        "catalog-episodes-view-empty",
        "coevo/store/catalog.py",
        "    WHERE r.messages <> ''",
        "    WHERE false",
        ("tests/rollout/test_episodes.py::test_the_rollouts_table_keeps_each_episode",),
    ),
    Mutation(
        "rollout-stage-logs-no-episode-metrics",
        "coevo/stages/rollout.py",
        "{**rollout_metrics(frame, cfg.episodes), **metrics}",
        "{**rollout_metrics(frame), **metrics}",
        ("tests/rollout/test_episodes.py::test_the_rollouts_table_keeps_each_episode",),
    ),
    Mutation(
        "verification-replays-environments-for-built-in-rewards",
        "coevo/verification/stage.py",
        ' or not any(":" in e.function for e in cfg.rewards):',
        ":",
        ("tests/rollout/test_episodes.py::test_verification_replays_no_environment_when_no_reward_plugin_reads_it",),
    ),
    Mutation(
        "episode-update-trains-the-tool-turns",
        "coevo/update/stage.py",
        "        mask=packed.loss_mask,  # [b, T] the policy's tokens",
        "        mask=packed.completion_mask,",
        ("tests/rollout/test_episodes.py::test_tool_turn_tokens_get_no_gradient_and_policy_tokens_score_as_one_turn",),
    ),
    Mutation(
        "pack-ignores-the-policy-masks",
        "coevo/update/logprobs.py",
        "            loss_mask[row, : len(mask)] = torch.as_tensor(list(mask), dtype=torch.float32)",
        "            pass",
        ("tests/rollout/test_episodes.py::test_tool_turn_tokens_get_no_gradient_and_policy_tokens_score_as_one_turn",),
    ),
    Mutation(
        "episode-bridge-loses-the-turns-closing",
        "coevo/rollout/episodes.py",
        "    return closing + after[len(before) :]",
        "    return after[len(before) :]",
        ("tests/rollout/test_episodes.py::test_an_episode_calls_the_tool_reads_its_turn_and_answers",),
    ),
    Mutation(
        "environment-replay-skips-the-calls",
        "coevo/rollout/episodes.py",
        "            run_tool(call, tools, cfg.environment.tool_timeout_s)",
        "            pass",
        ("tests/rollout/test_episodes.py::test_trl_style_environment_rewards_train_unchanged",),
    ),
    Mutation(
        "episode-past-its-budget-goes-on",
        "coevo/rollout/episodes.py",
        "    if last_turn or result.end_episode or over_budget:",
        "    if last_turn or result.end_episode:",
        ("tests/rollout/test_episodes.py::test_an_episode_out_of_turns_or_tokens_ends_truncated_and_marked",),
    ),
    Mutation(
        "guessing-held-out-secret-may-be-a-trained-one",
        "coevo/problems/guessing.py",
        'hidden if split != "train" else set()',
        "set()",
        ("tests/problems/test_guessing.py::test_held_out_games_share_no_range_and_no_hidden_number_with_training",),
    ),
    Mutation(
        "guessing-ranges-may-repeat",
        "coevo/problems/guessing.py",
        "        if (low, high) in taken:\n            continue\n",
        "",
        ("tests/problems/test_guessing.py::test_held_out_games_share_no_range_and_no_hidden_number_with_training",),
    ),
    Mutation(
        "guessing-feedback-points-the-wrong-way",
        "coevo/environments/guessing.py",
        "        if number < self.secret:",
        "        if number > self.secret:",
        (
            "tests/problems/test_guessing.py::test_a_wrong_guess_is_told_which_way_the_number_lies",
            "tests/problems/test_guessing.py::test_halving_solves_every_held_out_game_and_the_run_judges_and_rewards_it",
        ),
    ),
    Mutation(
        "guessing-without-its-environment-accepted",
        "coevo/config/tree.py",
        'if self.problems.source == "guessing" and self.environment.factory is None:',
        "if False:",
        (
            "tests/problems/test_guessing.py::test_games_that_cannot_be_drawn_and_a_game_without_its_environment_are_refused",
        ),
    ),
    Mutation(
        "held-out-gain-compares-the-wrong-way",
        "coevo/cli.py",
        "    diffs = problem_differences(after, before)  # [n]: pass(last) - pass(first)",
        "    diffs = problem_differences(before, after)  # [n]: pass(last) - pass(first)",
        (
            "tests/test_progress.py::test_the_held_out_gain_is_the_later_checkpoint_against_the_earlier_paired_by_problem",
        ),
    ),
    Mutation(
        "tool-warm-start-trains-the-tool-turns",
        "coevo/model/tool_warm_start.py",
        "        ids, mask = ids + bridge, mask + [0.0] * len(bridge)",
        "        ids, mask = ids + bridge, mask + [1.0] * len(bridge)",
        (
            "tests/model/test_tool_warm_start.py::test_a_demonstration_is_an_episode_with_the_tools_results_and_trains_the_assistant_turns",
        ),
    ),
    Mutation(
        "tool-warm-start-never-runs",
        "coevo/model/bootstrap.py",
        "    if cfg.bootstrap.tool_calls.steps:\n",
        "    if False:\n",
        ("tests/model/test_tool_warm_start.py::test_checkpoint_0_is_the_checkpoint_fine_tuned_to_call_the_calculator",),
    ),
    Mutation(
        "supervised-loss-hides-pad-tokens-inside",
        "coevo/model/supervised.py",
        "attention_mask=attention)",
        "attention_mask=(ids != pad_id).long())",
        ("tests/model/test_tool_warm_start.py::test_the_supervised_loss_attends_a_pad_token_inside_a_sequence",),
    ),
    Mutation(
        "guess-levels-setting-not-in-force",
        "coevo/prepare.py",
        "list(problems.guess_levels)",
        "[3, 4, 5]",
        ("tests/problems/test_guessing.py::test_held_out_games_share_no_range_and_no_hidden_number_with_training",),
    ),
    Mutation(
        "tool-warm-start-settings-out-of-the-bootstrap-key",
        "coevo/stages/prepare.py",
        '        include |= {"bootstrap": True, "prompt": True, "tools": True, "environment": True}',
        "        pass",
        ("tests/model/test_tool_warm_start.py::test_the_tool_warm_start_settings_enter_the_bootstrap_key",),
    ),
    Mutation(
        "readme-figures-not-mapped-into-the-site",
        "docs/hooks/home.py",
        'text = _FIGURE_LINK.sub("](figures/", _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8")))',
        'text = _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))',
        ("tests/test_docs.py::test_site_builds_strict",),
    ),
    Mutation(
        "skill-from-an-episodes-last-turn",
        "coevo/coevolvers/skill_bank.py",
        'passed["completion"] = worked_texts(passed)',
        "pass",
        (
            "tests/coevolvers/test_skill_bank.py::test_a_skill_from_an_episode_shows_its_calls_not_only_its_answer",
            "tests/coevolvers/test_memory.py::test_reflector_prompts_show_each_episodes_turns",
        ),
    ),
    Mutation(
        "lesson-from-an-episodes-last-turn",
        "coevo/coevolvers/memory.py",
        'zip(failed["question"], worked_texts(failed))',
        'zip(failed["question"], failed["completion"])',
        ("tests/coevolvers/test_memory.py::test_reflector_prompts_show_each_episodes_turns",),
    ),
    Mutation(
        "harness-collapse-reads-the-last-answer",
        "coevo/coevolvers/harness.py",
        '"collapsed_share": float((groups["sample"].nunique() == 1).mean()),',
        '"collapsed_share": float((groups["completion"].nunique() == 1).mean()),',
        (
            "tests/coevolvers/test_harness.py::"
            "test_episodes_cut_at_their_turn_limit_raise_it_before_any_format_or_truncation_fix",
        ),
    ),
    Mutation(
        "harness-turn-limit-never-applied",
        "coevo/coevolvers/harness.py",
        'update={k: v for k, v in overrides.items() if k == "max_turns"}',
        "update={}",
        (
            "tests/coevolvers/test_harness.py::"
            "test_episodes_cut_at_their_turn_limit_raise_it_before_any_format_or_truncation_fix",
            "tests/rollout/test_episodes.py::test_a_harness_gives_episodes_cut_at_their_turn_limit_more_turns",
        ),
    ),
    Mutation(
        "evaluation-ignores-the-turn-limit-in-force",
        "coevo/stages/evaluate.py",
        'update={"prompt": now.cfg.prompt, "environment": now.cfg.environment}',
        'update={"prompt": now.cfg.prompt}',
        ("tests/rollout/test_episodes.py::test_a_harness_gives_episodes_cut_at_their_turn_limit_more_turns",),
    ),
    Mutation(
        "harness-turn-limit-identity-dropped-on-episodes",
        "coevo/compare/spec.py",
        'if _runs_episodes(params) and any(e["kind"] == "harness" for e in entries):',
        "if False:",
        (
            "tests/compare/test_spec.py::"
            "test_the_harness_turn_limit_keeps_the_earlier_identity_only_where_no_harness_runs_episodes",
        ),
    ),
    Mutation(
        "a-dataset-without-answers-refused",
        "coevo/problems/loader.py",
        'if field != "answer":  # no row with an answer',
        "if True:  # no row with an answer",
        (
            "tests/test_trl_compat.py::test_a_dataset_without_answers_trains_and_is_evaluated_by_its_reward_functions",
            "tests/problems/test_loader.py::"
            "test_a_dataset_without_answers_loads_with_its_reference_column_for_the_reward_functions",
        ),
    ),
    Mutation(
        "the-verifier-judges-a-dataset-without-answers",
        "coevo/prepare.py",
        'any(entry.function == "verifier" for entry in cfg.rewards)',
        "False",
        ("tests/test_malformed_inputs.py::test_malformed_input[problems-missing-column]",),
    ),
    Mutation(
        "eval-loads-a-file-without-the-answers-check",
        "coevo/api.py",
        "load_user_problems(cfg, problems) if problems",
        "__import__('coevo.problems.loader').problems.loader.load_problem_file(problems) if problems",
        ("tests/test_cli.py::test_eval_of_a_file_without_answers_under_the_verifier_is_refused_naming_it",),
    ),
)


def tree_files(root: Path) -> list[str]:
    """The repository's files as git sees them: tracked plus untracked that are not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    )
    return sorted({name for name in out.stdout.decode().split("\0") if name and (root / name).is_file()})


def copy_tree(root: Path, dst: Path) -> None:
    for name in tree_files(root):
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((root / name).read_bytes())
        target.chmod((root / name).stat().st_mode)


def apply(mutation: Mutation, tree: Path) -> bool:
    """Apply the break in `tree`; False when its text is not there exactly once (a stale entry)."""
    path = tree / mutation.file
    text = path.read_text() if path.is_file() else ""
    if text.count(mutation.find) != 1:
        return False
    path.write_text(text.replace(mutation.find, mutation.replace))
    return True


def check(mutation: Mutation, root: Path = ROOT) -> tuple[str, float, str]:
    """(verdict, seconds, pytest's last lines) for one entry, on a fresh copy of `root`."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="coevo-mutation-") as tmp:
        tree = Path(tmp)
        copy_tree(root, tree)
        if not apply(mutation, tree):
            return "STALE", time.monotonic() - start, f"{mutation.file}: the text to replace is not there exactly once"
        # -n 0: one process (the entry's few tests gain nothing from xdist workers, and with them a
        # failure under -x exits 2, "interrupted", instead of 1)
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *mutation.tests]
        run = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    tail = "\n".join(line for line in run.stdout.splitlines()[-3:] if line.strip())
    # pytest exits 1 when tests ran and failed; 2-5 mean an interrupted run, a usage error or no tests
    verdict = "CAUGHT" if run.returncode == 1 else "MISSED" if run.returncode == 0 else f"ERROR(rc={run.returncode})"
    return verdict, time.monotonic() - start, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="run only entries whose name contains this text")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's last lines for caught entries too")
    args = parser.parse_args(argv)
    selected = [m for m in MUTATIONS if args.k in m.name]
    if args.list:
        print("\n".join(f"{m.name}: {m.file} -> {', '.join(m.tests)}" for m in selected))
        return 0
    failures = 0
    for mutation in selected:
        verdict, seconds, tail = check(mutation)
        failures += verdict != "CAUGHT"
        print(f"{verdict:7} {mutation.name} ({mutation.file}, {seconds:.0f} s)", flush=True)
        if verdict != "CAUGHT" or args.verbose:
            print("        " + tail.replace("\n", "\n        "), flush=True)
    print(f"{len(selected) - failures}/{len(selected)} caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
