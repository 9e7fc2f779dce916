"""Rubrics co-evolver: discrimination and prune/replace decisions against hand-computed variances on a
hand-made rollout frame (deterministic seed writer), variants, save/load, schema refusal, and the
`rubric` reward through the verification stage against a scripted judge on loopback."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from coevo.coevolvers import build_coevolver, load_coevolver
from coevo.coevolvers.base import CoevolverDirError, save_artifact
from coevo.coevolvers.composite import check_coevolvers, member_dir
from coevo.coevolvers.rubrics import (
    DEFAULT,
    SEED_POOL,
    RubricsCoEvolver,
    SeedWriter,
    criterion_id,
    criterion_scores,
    discrimination,
)
from coevo.config import CoevolverConfig, RubricsConfig
from coevo.problems.constraints import generate_constraints
from coevo.stages.verify import reward_metrics
from coevo.store.catalog import skill_events_from_report
from coevo.verification.rewards import reward_terms
from coevo.verification.stage import verify_rollouts
from schemas.skill_events import validate_skill_events

from ..conftest import tiny_config
from ..test_judge import GraderServer

SEED_IDS = [criterion_id(DEFAULT, t) for t in SEED_POOL[:4]]  # the shared rubric's ids (the rewards' details)
OWN_IDS = [criterion_id("no_commas", t) for t in SEED_POOL[:4]]  # the family's own copy after its first update


def config(**rubrics: object) -> CoevolverConfig:
    return CoevolverConfig(kind="rubrics", rubrics=RubricsConfig(**{"writer": "seed", **rubrics}))


def frames(
    scores: dict[str, dict[str, list[float | None]]], family: str = "no_commas"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rollouts and rewards: scores[problem][criterion id] lists one score per rollout (None = parse
    failure); details carry them as the rubric reward writes them, `rubric=` their plain mean."""
    rollouts, rewards = [], []
    for pid, by_criterion in scores.items():
        n = len(next(iter(by_criterion.values())))
        for k in range(n):
            rid = f"{pid}-{k}"
            values = {cid: v[k] for cid, v in by_criterion.items()}
            known = [v for v in values.values() if v is not None]
            details = f"rubric={sum(known) / len(known):.4f} " + " ".join(
                f"c.{cid}={'na' if v is None else v}" for cid, v in values.items()
            )
            rollouts.append(
                {
                    "rollout_id": rid,
                    "iteration": 1,
                    "problem_id": pid,
                    "family": family,
                    "question": f"Write about {pid}.",
                    "prompt": f"Write about {pid}.",
                    "completion": f"answer {k}",
                }
            )
            rewards.append({"rollout_id": rid, "reward": 0.0, "passed": False, "details": details})
    return pd.DataFrame(rollouts), pd.DataFrame(rewards)


# c1 saturated (all 1), c2 discriminates on p1, c3 all 0 (one parse failure), c4 a little on p1.
# discrimination = mean over problems of the population variance:
#   c1: (0 + 0) / 2 = 0;  c2: var(1,0,1,0) = 0.25, var(.5 x4) = 0 -> 0.125
#   c3: var(0,0,0) = 0 (the na left out), 0 -> 0;  c4: var(.2,.4,.2,.4) = 0.01, 0 -> 0.005
SCORES = {
    "p1": {
        SEED_IDS[0]: [1, 1, 1, 1],
        SEED_IDS[1]: [1, 0, 1, 0],
        SEED_IDS[2]: [0, None, 0, 0],
        SEED_IDS[3]: [0.2, 0.4, 0.2, 0.4],
    },
    "p2": {SEED_IDS[0]: [1, 1, 1, 1], SEED_IDS[1]: [0.5] * 4, SEED_IDS[2]: [0, 0, 0, 0], SEED_IDS[3]: [0, 0, 0, 0]},
}
PROBLEMS = pd.DataFrame({"id": ["p1", "p2"]})


def test_discrimination_matches_hand_computed_variances():
    long = criterion_scores(*frames(SCORES))
    assert [discrimination(long, cid) for cid in SEED_IDS] == pytest.approx([0.0, 0.125, 0.0, 0.005])
    assert discrimination(long, "nope") is None
    assert int(long["score"].isna().sum()) == 1


def test_saturated_criteria_are_pruned_and_replaced_by_the_writer():
    evolver = RubricsCoEvolver(config(), seed=0)
    report = evolver.update(1, PROBLEMS, *frames(SCORES))
    new_ids = [criterion_id("no_commas", t) for t in SEED_POOL[4:6]]  # the next two unused seed criteria
    assert [r["id"] for r in report["retired"]] == [OWN_IDS[0], OWN_IDS[2]]
    assert report["retired"][0]["reason"] == "discrimination 0 <= prune_below"
    assert [(m["id"], m["gap"]) for m in report["measured"]] == [
        (cid, pytest.approx(d)) for cid, d in zip(OWN_IDS, [0.0, 0.125, 0.0, 0.005])
    ]
    assert report["new_candidates"] == new_ids
    assert [c.id for c in evolver.criteria("no_commas")] == [OWN_IDS[1], OWN_IDS[3], *new_ids]
    assert [c.born for c in evolver.criteria("no_commas")] == [0, 0, 1, 1]
    assert [c.id for c in evolver.criteria("lowercase")] == SEED_IDS  # other families keep the seed rubric
    rows = {r["criterion"]: r for r in report["criteria"] if r["family"] == "no_commas"}
    assert rows[OWN_IDS[1]]["discrimination"] == pytest.approx(0.125) and rows[new_ids[0]]["discrimination"] is None
    assert report["judge_parse_fail"] == 1 and report["counts"] == {"criteria": 4}
    events = validate_skill_events(skill_events_from_report(report, 1, "report"), "report")  # what the catalog ingests
    assert sorted(events["event"].value_counts().items()) == [("created", 2), ("measured", 4), ("retired", 2)]


def test_writer_sees_best_and_worst_by_rubric_score():
    seen = {}

    class Recorder(SeedWriter):
        def write(self, family, best, worst, existing, n):
            seen.update(
                family=family,
                best=[r["response"] for r in best],
                worst=[r["response"] for r in worst],
                existing=existing,
                n=n,
            )
            return super().write(family, best, worst, existing, n)

    evolver = RubricsCoEvolver(config(shown=1), seed=0, writer=Recorder())
    evolver.update(1, PROBLEMS, *frames(SCORES))
    # rubric = mean of the parsed scores: p1-0 and p1-2 (1+1+0+.2)/4 = .55 tie for best (the lower id wins),
    # p1-3 (1+0+0+.4)/4 = .35 is the worst (below p2's (1+.5+0+0)/4 = .375)
    assert seen == {
        "family": "no_commas",
        "best": ["answer 0"],
        "worst": ["answer 3"],
        "existing": SEED_POOL[:4],
        "n": 2,
    }


def test_frozen_rubric_reports_but_never_changes(tmp_path):
    cfg = config().model_copy(update={"frozen": True})
    evolver = RubricsCoEvolver(cfg, seed=0)
    before = evolver.save(tmp_path / "before")
    report = evolver.update(1, PROBLEMS, *frames(SCORES))
    assert report["retired"] == [] and report["new_candidates"] == [] and len(report["measured"]) == 4
    assert evolver.save(tmp_path / "after") == before


@pytest.mark.parametrize("settings", [{"variant": "static"}, {"min_groups": 3}])
def test_static_or_too_few_groups_keep_the_criteria(settings):
    evolver = RubricsCoEvolver(config(**settings), seed=0)
    report = evolver.update(1, PROBLEMS, *frames(SCORES))
    assert report["retired"] == [] and report["new_candidates"] == []
    assert [c.id for c in evolver.criteria("no_commas")] == OWN_IDS
    assert [c.discrimination for c in evolver.criteria("no_commas")] == pytest.approx([0.0, 0.125, 0.0, 0.005])


def test_save_load_round_trip_and_refusals(tmp_path):
    cfg = config()
    evolver = build_coevolver(cfg, seed=0)
    evolver.update(1, PROBLEMS, *frames(SCORES))
    digest = evolver.save(tmp_path / "v1")
    loaded = load_coevolver(tmp_path / "v1", cfg, seed=0)
    assert loaded.rubric == evolver.rubric and loaded.save(tmp_path / "v1b") == digest
    (tmp_path / "v1" / "rubric.json").write_text("{}")
    with pytest.raises(CoevolverDirError, match="rubric.json: content does not match"):
        load_coevolver(tmp_path / "v1", cfg, seed=0)
    bad = json.loads(evolver.rubric.model_dump_json())
    bad["families"][DEFAULT][0]["weight"] = -1
    save_artifact(tmp_path / "bad", "rubrics", {"rubric.json": json.dumps(bad).encode()})
    with pytest.raises(CoevolverDirError, match=r"bad/rubric.json: not a rubric: families\.\*\.0\.weight"):
        load_coevolver(tmp_path / "bad", cfg, seed=0)


def grade(user: str) -> str:
    """A scripted judge: 'vague' for the topic criterion (a parse failure), 10 when the response has no
    comma, else 2."""
    response = user.split("Response:\n", 1)[1].split("\n\nCriterion:", 1)[0]
    if "about the topic" in user or response == "???":
        return "vague"
    return "2" if "," in response else "10"


def test_rubric_reward_through_the_verification_stage(loopback, tmp_path):
    server = loopback(GraderServer(grade))
    writer = {"kind": "worked_example", "base_url": server.base_url, "model": "grader", "timeout_s": 5}
    rewards_cfg = [{"function": "rubric"}, {"function": "verifier", "weight": 0.0}]
    cfg = tiny_config(tmp_path, coevolver={"kind": "rubrics", "writer": writer}, rewards=rewards_cfg)
    build_coevolver(cfg.coevolver_list[0], cfg.seed).save(cfg.run.out_dir / "coevolver" / "iter_0000")
    _, test = generate_constraints(["no_commas"], 1, 1, seed=0)
    rollouts = pd.DataFrame(
        {
            "rollout_id": ["a", "b", "c"],
            "iteration": [1] * 3,
            "problem_id": [test["id"][0]] * 3,
            "completion": ["No commas here.", "Yes, commas.", "???"],
        }
    )
    rewards = verify_rollouts(rollouts, test, cfg)
    # 3 of 4 seed criteria parse (the topic one fails): mean(1, 1, 1) = 1.0 and mean(.2, .2, .2) = 0.2;
    # no criterion parses for "???": no rubric value (null component), reward 0 from the other terms
    assert list(rewards["reward"]) == pytest.approx([1.0, 0.2, 0.0])
    assert list(rewards["passed"]) == [True, False, False] and set(rewards["verifier"]) == {
        "rubric"
    }  # the rubric is the first judge
    assert (
        rewards["details"][2].startswith("rubric=na judge_parse_fail=4 ")
        and json.loads(rewards["components"][2])["rubric"] is None
    )
    details = rewards["details"][1]
    assert details.startswith("rubric=0.2000 judge_parse_fail=1 ") and "kind=no_commas gold=fail" in details
    assert json.loads(rewards["components"][0]) == {"rubric": 1.0, "verifier": 1.0}  # the gold value is kept, weight 0
    assert server.hits == 12 and (cfg.run.out_dir / "judge" / "cache.jsonl").is_file()
    assert reward_metrics(rollouts.assign(family="no_commas"), rewards)["verify/judge_parse_fail"] == 6.0
    verify_rollouts(rollouts, test, cfg)
    assert server.hits == 12  # the second verification reads the cache
    evolver = load_coevolver(cfg.run.out_dir / "coevolver" / "iter_0000", cfg.coevolver_list[0], 0)
    report = evolver.update(1, test, rollouts.assign(family="no_commas", question=test["prompt"][0]), rewards)
    assert report["judge_parse_fail"] == 6  # read back from the details


def test_the_judge_sees_prompt_and_response_only_greedy_and_short(loopback, tmp_path):
    """docs/coevolvers/rubrics.md: the judge sees prompt and response only, never the gold check (the problems' `answer`
    spec, in the very rows the reward scores), and samples greedily, at most 16 tokens: every request
    the endpoint received, read on the endpoint's side."""
    server = loopback(GraderServer(grade))
    writer = {"kind": "worked_example", "base_url": server.base_url, "model": "grader", "timeout_s": 5}
    cfg = tiny_config(tmp_path, coevolver={"kind": "rubrics", "writer": writer}, rewards=[{"function": "rubric"}])
    build_coevolver(cfg.coevolver_list[0], cfg.seed).save(cfg.run.out_dir / "coevolver" / "iter_0000")
    _, test = generate_constraints(["include_word", "no_commas"], 2, 2, seed=0)
    completions = ["Quiet wolves, at night.", "Music plays"]
    rollouts = pd.DataFrame(
        {"rollout_id": ["a", "b"], "iteration": [1, 1], "problem_id": list(test["id"]), "completion": completions}
    )
    verify_rollouts(rollouts, test, cfg)
    assert len(server.bodies) == 2 * len(SEED_IDS)  # one request per (row, criterion)
    asked = set()
    for body in server.bodies:
        assert body["temperature"] == 0.0 and 0 < body["max_tokens"] <= 16, {
            k: body.get(k) for k in ("temperature", "max_tokens")
        }
        text = "\n".join(message["content"] for message in body["messages"])
        assert not any(gold in text for gold in test["answer"]) and '"kind"' not in text, (
            text
        )  # no gold spec, whole or in part
        user = body["messages"][-1]["content"]
        task, response = user.split("Task:\n", 1)[1].split("\n\nResponse:\n", 1)
        asked.add((task, response.split("\n\nCriterion:", 1)[0]))
    assert asked == set(zip(test["prompt"], completions))  # the task is the problem's prompt, exactly


def test_rubric_reward_needs_the_rubrics_coevolver_and_an_endpoint(tmp_path):
    with pytest.raises(ValueError, match="needs a rubrics co-evolver"):
        reward_terms(tiny_config(tmp_path, rewards=[{"function": "rubric"}]))
    with pytest.raises(ValueError, match="the 'rubric' reward \\(its judge\\) needs coevolver.writer.base_url"):
        reward_terms(tiny_config(tmp_path, coevolver={"kind": "rubrics"}, rewards=[{"function": "rubric"}]))


def list_grade(user: str) -> str:
    """Judge for the list run: the topic criterion always met (saturated: pruned after iteration 1 and
    replaced by the writer's criterion); any other criterion scores (len(response) + len(criterion)) % 11,
    so which criteria a rollout was judged by shows in its reward."""
    if "Write one new criterion" in user:
        return "The response ends with a full stop."
    response, criterion = user.split("Response:\n", 1)[1].split("\n\nCriterion: ", 1)
    criterion = criterion.split("\n\n", 1)[0]
    return "10" if "about the topic" in criterion else str((len(response) + len(criterion)) % 11)


def test_rubrics_in_a_coevolver_list_play_the_reward_role(loopback, tmp_path):
    """coevolver: [curriculum, rubrics] with the `rubric` reward, through the plain driver: each
    iteration k's rewards are the weighted judge scores, against the criteria of the rubrics member
    of co-evolver version k-1 (recomputed here from that member's saved rubric and the judge's rule),
    and the rubric evolves between versions, so a reward judged by another rubric differs."""
    from coevo.coevolvers.base import read_manifest
    from coevo.coevolvers.rubrics import load_rubric
    from coevo.driver import train
    from schemas.rewards import read_rewards
    from schemas.rollouts import read_rollouts

    server = loopback(GraderServer(list_grade))
    writer = {"base_url": server.base_url, "model": "grader", "timeout_s": 10}
    cfg = tiny_config(
        tmp_path,
        problems={"source": "constraints", "n_train": 60, "n_test": 12},
        policy={"shape": {"max_position": 128}},
        sampling={"max_new_tokens": 16},
        rewards=[{"function": "rubric"}],
        coevolver=[{"kind": "curriculum"}, {"kind": "rubrics", "writer": writer, "rubrics": {"min_groups": 1}}],
    )
    check_coevolvers(cfg)  # one player per role
    train(cfg)
    versions = cfg.run.out_dir / "coevolver"
    assert [m["kind"] for m in read_manifest(versions / "iter_0001")["members"]] == ["curriculum", "rubrics"]
    rubrics = [load_rubric(member_dir(cfg, versions / f"iter_{k:04d}", "rubrics")) for k in (0, 1)]
    assert member_dir(cfg, versions / "iter_0001", "rubrics") == versions / "iter_0001" / "1-rubrics"
    texts = [{c.text for cs in rubric.families.values() for c in cs} for rubric in rubrics]
    assert texts[0] != texts[1] and "The response ends with a full stop." in texts[1]  # the rubric evolved
    for it, rubric in zip((1, 2), rubrics):
        rollouts = read_rollouts(cfg.run.out_dir / "rollouts" / f"iter_{it:04d}.parquet")
        rewards = read_rewards(cfg.run.out_dir / "rewards" / f"iter_{it:04d}.parquet").set_index("rollout_id")
        for row in rollouts.itertuples():
            criteria = rubric.families.get(row.family, rubric.families[DEFAULT])
            scores = [int(list_grade(f"Response:\n{row.completion}\n\nCriterion: {c.text}\n\n")) / 10 for c in criteria]
            expected = sum(c.weight * s for c, s in zip(criteria, scores)) / sum(c.weight for c in criteria)
            got = rewards.loc[row.rollout_id]
            assert got["verifier"] == "rubric" and got["reward"] == pytest.approx(expected, abs=1e-9), (
                it,
                row.family,
                row.completion,
            )
            assert bool(got["passed"]) == (expected >= cfg.coevolver_list[1].rubrics.pass_threshold)
