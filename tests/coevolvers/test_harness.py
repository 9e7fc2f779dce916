"""The harness co-evolver: diagnosis rules on hand-made evidence, the acceptance rule, a wrong
answer-format instruction backtested through the real chat renderer, and real runs on the tiny
policy: an injected bad temperature the harness backtests and fixes, an accepted instruction the
next iteration samples with, and a zeroed shaping term the next iteration is scored without."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from coevo.coevolvers import Harness, build_coevolver, load_coevolver
from coevo.coevolvers.base import CoevolverDirError
from coevo.coevolvers.harness import HARNESS, _ladder, group_evidence
from coevo.config import CoevolverConfig, Config, HarnessConfig, PromptConfig, RewardEntry, SamplingConfig

from ..conftest import tiny_config
from ..test_prompting import chat_tokenizer

BASE = Config(sampling=SamplingConfig(temperature=0.05, max_new_tokens=8))
CHAT = BASE.model_copy(update={"prompt": PromptConfig(format="chat", instruction={"math": "Explain your reasoning."})})
BOXED, NUMBER = "Put the final answer in \\boxed{}.", "Reply with the number only."
PROBLEMS = pd.DataFrame({"id": ["a", "b", "c"], "family": ["add", "add", "add"], "answer": ["7", "4", "2"]})


def batch(groups: dict[str, list[tuple[str, float, bool]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rollouts and rewards for {problem id: [(completion, reward, finished), ...]}; reward 1 passes."""
    rollouts, rewards = [], []
    for pid, rows in groups.items():
        for completion, reward, finished in rows:
            rid = f"r{len(rollouts):03d}"
            rollouts.append(
                {
                    "rollout_id": rid,
                    "problem_id": pid,
                    "variant": "solo",
                    "completion": completion,
                    "finished": finished,
                }
            )
            rewards.append({"rollout_id": rid, "reward": reward, "passed": reward == 1.0})
    return pd.DataFrame(rollouts), pd.DataFrame(rewards)


COLLAPSED = batch(
    {"a": [("7", 1.0, True)] * 4, "b": [("3", 0.0, True)] * 4, "c": [("1", 0.0, True), ("2", 1.0, True)] * 2}
)
SPREAD = batch({"a": [("7", 1.0, True), ("8", 0.0, True)] * 2, "b": [("3", 0.0, True), ("4", 1.0, True)] * 2})
CUT = batch({"a": [("77", 1.0, False), ("7", 1.0, True)] * 2, "b": [("3", 0.0, False), ("4", 1.0, True)] * 2})
# failing completions: cut ("First, 3"), stating no number ("seven"), or readable and wrong ("8")
WORDY = batch(
    {
        "a": [("First, 3", 0.0, False), ("seven", 0.0, True), ("8", 0.0, True), ("7", 1.0, True)],
        "b": [("So 2 and", 0.0, False), ("4", 1.0, True)] * 2,
    }
)


def harness(**params: object) -> Harness:
    return build_coevolver(CoevolverConfig(kind="harness", harness=HarnessConfig(**params)), seed=0)


def test_evidence_shares_by_hand():
    assert group_evidence(*COLLAPSED, PROBLEMS) == {
        "collapsed_share": 2 / 3,
        "signal_share": 1 / 3,
        "format_failure_share": 0.0,
        "finished_share": 1.0,
        "unfinished_share": 0.0,
        "formatted_share": 1.0,
        "turn_limited_share": 0.0,
        "within_turns_share": 1.0,
        "misranked_share": 0.0,
        "ranked_share": 1.0,
        "mean_reward": 0.5,
        "pass_rate": 0.5,
    }
    rollouts, rewards = SPREAD
    shaped = rewards.assign(
        reward=[1.0, 1.5, 1.0, 1.5, 0.5, 1.0, 0.5, 1.0]
    )  # a's failing "8" scored 1.5 > its passing 1.0
    assert (
        group_evidence(rollouts, shaped, PROBLEMS)["misranked_share"] == 4 / 8
    )  # a: 2x2 pairs all wrong, b: 2x2 all right
    assert group_evidence(*CUT, PROBLEMS)["finished_share"] == 0.5
    assert (
        group_evidence(*CUT, PROBLEMS)["format_failure_share"] == 2 / 8
    )  # ("3", cut, failed) x2; a cut pass ("77") is no failure
    assert (
        group_evidence(*WORDY, PROBLEMS)["format_failure_share"] == 4 / 8
    )  # "First, 3", "seven", "So 2 and" x2; not "8"
    code = PROBLEMS.assign(family="humaneval")
    assert group_evidence(*WORDY, code)["format_failure_share"] == 0.0  # the math instruction does not apply to code


def test_diagnosis_walks_up_the_ladder_past_recent_rejections():
    assert _ladder(0.05, 2.0, 1.0, 0.05) == [0.1, 0.2, 0.4, 0.8, 1.0]
    h = harness()
    assert h.diagnose(group_evidence(*SPREAD, PROBLEMS), BASE, 1) is None  # every group varies, every completion ends
    change = h.diagnose(group_evidence(*COLLAPSED, PROBLEMS), BASE, 1)
    assert (
        change["knob"] == "temperature" and change["value"] == 0.1 and "collapsed_share 0.67 >= 0.25" in change["why"]
    )
    h.rejected_at = {"temperature=0.1": 1, "temperature=0.2": 2}
    assert h.diagnose(group_evidence(*COLLAPSED, PROBLEMS), BASE, 3)["value"] == 0.4
    assert h.diagnose(group_evidence(*COLLAPSED, PROBLEMS), BASE, 6)["value"] == 0.1  # retry_after 5 has passed for 0.1
    truncated = h.diagnose(group_evidence(*CUT, PROBLEMS), BASE, 1)
    assert (truncated["knob"], truncated["value"]) == ("max_new_tokens", 16)
    assert (
        harness(max_temperature=0.05).diagnose(group_evidence(*COLLAPSED, PROBLEMS), BASE, 1) is None
    )  # nothing above the cap


def episodes(turns: list[int], truncated: list[bool], calls: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Problem a's group of episodes, failing: episode i makes `turns[i]` assistant turns, each a call
    `calls[i]` answered "7", but the last, which answers "7" unless the episode was cut after its call."""
    rollouts, rewards = batch({"a": [("7", 0.0, not cut) for cut in truncated]})
    messages = []
    for n, cut, call in zip(turns, truncated, calls):
        made = [
            [{"role": "assistant", "content": call}, {"role": "tool", "content": "7"}] for _ in range(n - (not cut))
        ]
        answer = [] if cut else [{"role": "assistant", "content": "7"}]
        messages.append(json.dumps([turn for pair in made for turn in pair] + answer))
    return rollouts.assign(turns=turns, truncated=truncated, messages=messages), rewards


def test_episodes_cut_at_their_turn_limit_raise_it_before_any_format_or_truncation_fix():
    """An episode cut in its last allowed turn with a call unanswered is turn-limited (one cut earlier,
    by the token budget, is not); the harness doubles environment.max_turns up to its cap, where samples
    are episodes; two episodes that answer alike by different calls are not a collapse."""
    cut = episodes([2, 2, 1, 2], [True, True, True, False], ["call x"] * 4)
    evidence = group_evidence(*cut, PROBLEMS, max_turns=2)
    assert (evidence["turn_limited_share"], evidence["within_turns_share"]) == (0.5, 0.5)
    assert evidence["unfinished_share"] == 0.75 and evidence["format_failure_share"] == 0.75  # a cut episode shows both
    assert group_evidence(*cut, PROBLEMS)["turn_limited_share"] == 0.0  # no limit given: none counted
    tools = Config(
        sampling=BASE.sampling,
        tools=["coevo.environments.calculator:add"],
        environment={"max_turns": 2},
        prompt={"format": "chat"},
        coevolver={"update_context": "keep"},
    )
    change = harness().diagnose(evidence, tools, 1)
    assert change == {"knob": "max_turns", "value": 4, "why": "turn_limited_share 0.50 >= 0.25"}
    assert harness().ladder("max_turns", tools) == [("max_turns", 4), ("max_turns", 8), ("max_turns", 16)]
    assert harness(max_turns=2).ladder("max_turns", tools) == []
    assert harness().ladder("max_turns", CHAT) == []  # one-turn samples have no turn limit to raise
    assert harness().diagnose(evidence, CHAT, 1)["knob"] == "instruction"  # so the format fix is next in line
    assert harness().apply(tools).environment.max_turns == 2  # version 0: nothing overridden
    h = harness()
    h.overrides = {"max_turns": 8}
    assert h.apply(tools).environment.max_turns == 8 and h.knobs(h.apply(tools))["max_turns"] == 8
    assert "max_turns" not in h.knobs(CHAT)
    alike = episodes([2, 2], [False, False], ["call x", "call y"])
    assert group_evidence(*alike, PROBLEMS, max_turns=4)["collapsed_share"] == 0.0


def test_a_format_failure_tries_the_instructions_in_order_then_falls_through_to_truncation():
    """The plain layout has no instruction to change: its cut completions are a truncation. Under the
    chat format the instructions are tried first (the one in force skipped), and once each is
    rejected within retry_after iterations the next failure in line, truncation, gets its turn."""
    h, wordy = harness(), group_evidence(*WORDY, PROBLEMS)
    assert h.diagnose(wordy, BASE, 1)["knob"] == "max_new_tokens"
    change = h.diagnose(wordy, CHAT, 1)
    assert change == {"knob": "instruction", "value": BOXED, "why": "format_failure_share 0.50 >= 0.25"}
    boxed = CHAT.model_copy(update={"prompt": PromptConfig(format="chat", instruction={"math": BOXED})})
    assert h.diagnose(wordy, boxed, 1)["value"] == NUMBER  # the instruction in force is not a candidate
    h.rejected_at = {f"instruction={BOXED}": 1, f"instruction={NUMBER}": 2}
    assert h.diagnose(wordy, CHAT, 3)["knob"] == "max_new_tokens"


def test_misranking_shaping_terms_are_zeroed_in_order_and_the_gold_verifier_never_touched():
    shaped = BASE.model_copy(
        update={
            "rewards": [
                RewardEntry(function="verifier"),
                RewardEntry(function="format", weight=2.0),
                RewardEntry(function="m:len", name="length"),
            ]
        }
    )
    h, rollouts = harness(), SPREAD[0]
    misranked = group_evidence(rollouts, SPREAD[1].assign(reward=[1.0, 1.5, 1.0, 1.5, 0.5, 1.0, 0.5, 1.0]), PROBLEMS)
    change = h.diagnose(misranked, shaped, 1)
    assert change == {"knob": "weight:format", "value": 0.0, "why": "misranked_share 0.50 >= 0.1"}
    h.rejected_at = {"weight:format=0.0": 1}
    assert h.diagnose(misranked, shaped, 2)["knob"] == "weight:length"  # the next term
    h.overrides = {"weight:format": 0.0}
    assert [e.weight for e in h.apply(shaped).rewards] == [1.0, 0.0, 1.0]
    assert h.ladder("weight:", h.apply(shaped)) == [("weight:length", 0.0)]  # a zeroed term is done


def test_a_small_failure_needs_half_its_room_not_min_gain():
    """1 of 12 (passing, failing) pairs misranked: no fix can gain min_gain 0.1, so half the room
    (1/24) suffices; zeroing the term ranks every pair right (+1/12) and is kept. The pass rate
    is unchanged: the same completions pass in both arms."""
    rows = {
        "a": [("7", 1.0, True), ("7", 2.0, True), ("7", 2.0, True), ("8", 1.0, True), ("8", 0.0, True)],
        "b": [("4", 1.0, True)] * 3 + [("3", 0.0, True)] * 2,
    }
    rollouts, rewards = batch(rows)
    rewards["passed"] = rollouts["completion"].isin(["7", "4"]).to_numpy()
    shaped = BASE.model_copy(update={"rewards": [RewardEntry(function="verifier"), RewardEntry(function="format")]})

    def sample(problems: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        weight = trial.rewards[1].weight
        return rollouts, rewards.assign(reward=rewards["reward"] if weight == 1.0 else rewards["passed"].astype(float))

    h = harness(misrank_share=0.05, backtest_before="resample")
    report = h.revise(2, rollouts, rewards, PROBLEMS, shaped, sample)
    entry = report["entry"]
    assert (entry["knob"], entry["value"], entry["before"]["misranked_share"], entry["after"]["misranked_share"]) == (
        "weight:format",
        0.0,
        1 / 12,
        0.0,
    )
    assert entry["accepted"] is True and h.overrides == {"weight:format": 0.0}


def test_acceptance_needs_the_measure_to_gain_without_losing_passes():
    """The rule, on fixed evidence: a candidate arm whose groups vary but whose reward falls by more
    than max_pass_drop is rejected (a harmful change), one that gains with the reward kept is kept."""
    arms = {
        0.05: COLLAPSED,
        0.1: batch({"a": [("1", 0.0, True), ("2", 0.0, True)] * 2, "b": [("3", 0.0, True), ("4", 0.0, True)] * 2}),
    }

    def sample(problems: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        return arms[trial.sampling.temperature]

    h, train = (
        harness(backtest_before="resample"),
        pd.DataFrame({"id": [f"p{i}" for i in range(20)] + ["a", "b", "c"], "family": "add", "answer": "1"}),
    )
    report = h.revise(1, *COLLAPSED, train, BASE, sample)
    assert report["entry"]["accepted"] is False and h.overrides == {} and h.rejected_at == {"temperature=0.1": 1}
    arms[0.2] = SPREAD  # all groups vary, mean reward 0.5 >= 0.5 - 0.05
    report = h.revise(2, *COLLAPSED, train, BASE, sample)
    assert (
        report["entry"]["value"] == 0.2 and report["entry"]["accepted"] is True and h.overrides == {"temperature": 0.2}
    )
    assert (
        h.apply(BASE).sampling == SamplingConfig(temperature=0.2, max_new_tokens=8)
        and h.apply(BASE).prompt == BASE.prompt
    )
    assert len(h.backtest_slice(train)) == 16 and h.backtest_slice(train).equals(h.backtest_slice(train.iloc[::-1]))


def test_the_before_arm_is_the_batchs_own_rollouts_on_the_half_the_diagnosis_did_not_read():
    """backtest_before: rollouts. Only the candidate is sampled, once, on the backtested half; the
    before arm is that half's own rollouts. Here the diagnosed half collapsed by chance and the
    backtested half did not: a candidate that changes nothing is rejected. Had the diagnosed rollouts
    also been the before arm, the same candidate would have shown a gain (signal 1/2 -> 1) and passed."""
    h = harness()
    ids = [f"p{i}" for i in range(8)]
    diagnosed, held = h.split_batch(pd.DataFrame({"problem_id": ids}), iteration=3)
    assert len(held) == 4 and diagnosed.isdisjoint(held) and diagnosed | held == set(ids)
    rows = {
        pid: [("7", 1.0, True)] * 4 if pid in diagnosed else [("7", 1.0, True), ("8", 0.0, True)] * 2 for pid in ids
    }
    rollouts, rewards = batch(rows)
    train = pd.DataFrame({"id": ids + ["q"], "family": "add", "answer": "7"})
    calls: list[tuple[list[str], float]] = []

    def sample(problems: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        calls.append((sorted(problems["id"]), trial.sampling.temperature))
        return batch({pid: [("7", 1.0, True), ("8", 0.0, True)] * 2 for pid in problems["id"]})

    report = h.revise(3, rollouts, rewards, train, BASE, sample)
    entry = report["entry"]
    assert calls == [(sorted(held), entry["value"])]  # one arm: the candidate, on the backtested half
    assert report["evidence"]["collapsed_share"] == 1.0  # the diagnosis read the diagnosed half only
    assert entry["before"] == group_evidence(*batch({pid: rows[pid] for pid in held}), train)
    assert (entry["before"]["signal_share"], entry["after"]["signal_share"], entry["accepted"]) == (1.0, 1.0, False)
    with_context = rollouts.assign(variant=["base"] * 4 + ["solo"] * (len(rollouts) - 4))
    calls.clear()
    harness().revise(3, with_context, rewards, train, BASE, sample)
    assert len(calls) == 2  # context variants: both arms sampled on the fixed slice


def test_a_wrong_instruction_is_backtested_through_the_chat_renderer_and_replaced():
    """The backtest's arms differ only in the instruction the real chat renderer writes into the
    prompt; a responder that follows it (explains and is cut off, or answers in a box) stands in for
    the frozen policy. The fix removes the format failures without losing reward: accepted, and the
    harness then renders every prompt with it."""
    from coevo.rollout.prompting import prompt_renderer

    tokenizer = chat_tokenizer()
    train = pd.DataFrame(
        {
            "id": [f"p{i}" for i in range(4)],
            "family": "add",
            "prompt": ["1+2=", "2+2=", "3+4=", "1+1="],
            "answer": ["3", "4", "7", "2"],
        }
    )
    seen: list[str] = []

    def sample(problems: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        prompts = prompt_renderer(trial.prompt, tokenizer).render_all(problems.to_dict("records"))
        seen.extend(prompts)
        rows = {
            pid: [((f"\\boxed{{{answer}}}", 1.0, True) if BOXED in prompt else ("First we", 0.0, False))] * 4
            for pid, answer, prompt in zip(problems["id"], problems["answer"], prompts)
        }
        return batch(rows)

    h = harness(backtest_problems=4, backtest_before="resample")
    report = h.revise(1, *batch({"p0": [("First we", 0.0, False), ("So", 0.0, False)] * 2}), train, CHAT, sample)
    entry = report["entry"]
    assert (entry["knob"], entry["from"], entry["value"], entry["measure"]) == (
        "instruction",
        "Explain your reasoning.",
        BOXED,
        "formatted_share",
    )
    assert (entry["before"]["formatted_share"], entry["after"]["formatted_share"], entry["accepted"]) == (
        0.0,
        1.0,
        True,
    )
    assert all("Explain your reasoning." in p for p in seen[:4]) and all(
        BOXED in p and "Explain" not in p for p in seen[4:]
    )
    assert h.overrides == {"instruction": BOXED} and h.apply(CHAT).prompt.instruction.math == BOXED
    assert h.apply(CHAT).sampling == CHAT.sampling


def sampled_at(checkpoint, rollouts, temperature: float) -> bool:
    """Whether the sampling logprobs recorded with `rollouts` are those of the policy at `checkpoint`
    at `temperature`: log softmax(logits / T) of each sampled token, recomputed by a plain forward
    pass per row (no engine code), within float tolerance (other temperatures differ by far more)."""
    import torch

    from coevo.model.checkpoint import load_policy
    from schemas.rollouts import read_rollouts

    model = load_policy(checkpoint, "cpu").model
    for row in read_rollouts(rollouts).itertuples():
        prompt, completion = list(row.prompt_ids), list(row.completion_ids)
        with torch.no_grad():
            logits = (
                model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
            )  # [C, V]
        logprobs = (
            torch.log_softmax(logits / temperature, dim=-1)
            .gather(-1, torch.tensor(completion).unsqueeze(-1))
            .squeeze(-1)
        )  # [C]
        if not torch.allclose(logprobs, torch.tensor(list(row.sampling_logprobs), dtype=torch.float32), atol=1e-3):
            return False
    return True


# nearly every group of the tiny policy collapses (15 of 16; 0.05 left 5 of 16); the candidate fix starts from 0.05
# all the same
COLD = 0.01


def test_a_run_with_a_collapsing_temperature_is_diagnosed_backtested_and_fixed(tmp_path):
    from coevo.driver import train
    from coevo.layout import RunLayout
    from coevo.store.lineage import read_record

    cfg = tiny_config(
        tmp_path,
        run={"iterations": 4, "retention": {"keep_last": None}},
        sampling={"temperature": COLD},
        rollout={"problems_per_iter": 16},  # a backtest half of 8 problems, some of which pass at all
        coevolver={"kind": "harness", "harness": {"temperature_step": 4.0}},
    )
    train(cfg)
    out = cfg.run.out_dir
    reports = [json.loads((out / "reports" / f"iter_{it:04d}.json").read_text())["harness"] for it in range(1, 5)]
    first = reports[0]["entry"]
    assert (
        first["measure"] == "signal_share"
        and first["before"]["collapsed_share"] >= cfg.coevolver_list[0].harness.collapse_share
        and first["value"] == 0.2
    )
    saved = load_coevolver(out / "coevolver" / "iter_0004", cfg.coevolver_list[0], cfg.seed)
    accepted = [e for e in saved.entries if e["accepted"]]
    assert accepted, f"no backtest accepted a higher temperature: {saved.entries}"
    fixed_at = accepted[0]["iteration"]
    assert all(r["in_force"]["temperature"] == COLD for r in reports[:fixed_at])
    assert fixed_at < 4, "the fix came too late for a later iteration to sample with it"
    assert reports[fixed_at]["in_force"]["temperature"] == accepted[0]["value"]
    for it in range(1, 5):  # read where the sampler used it: the logprobs it recorded are those at this temperature
        temperature = accepted[0]["value"] if it > fixed_at else COLD
        assert sampled_at(
            RunLayout(out).checkpoint(it - 1), out / "rollouts" / f"iter_{it:04d}.parquet", temperature
        ), f"iteration {it}"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["coevo/harness_accepted"] for m in metrics].index(1.0) + 1 == fixed_at
    assert read_record(out / "checkpoints" / "iter_0004")["coevolver"]["kind"] == "harness"  # the version trained under


def test_a_run_under_chat_samples_and_trains_with_the_accepted_instruction(tmp_path, tiny_policy_dir):
    """A real run on the chat-templated tiny policy with a wrong instruction; the acceptance rule is
    opened (min_gain 0, any pass-rate drop) so the first format diagnosis is accepted whatever the tiny
    policy does, and the plumbing is what is checked: iteration 1 samples with the wrong instruction,
    iteration 2 with the fix, and its update trains on those very tokens."""
    from coevo.driver import train
    from coevo.store.lineage import read_record
    from schemas.rollouts import read_rollouts

    from ..test_prompting import templated_copy

    checkpoint = templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")
    opened = {
        "collapse_share": 1.0,
        "truncation_share": 1.0,
        "format_share": 0.01,
        "min_gain": 0.0,
        "max_pass_drop": 1.0,
    }
    cfg = tiny_config(
        tmp_path,
        prompt={"format": "chat", "instruction": {"math": "Explain your reasoning."}, "context_header": None},
        policy={"checkpoint": str(checkpoint)},
        coevolver={"kind": "harness", "harness": opened},
    )
    train(cfg)
    out = cfg.run.out_dir
    entry = json.loads((out / "reports" / "iter_0001.json").read_text())["harness"]["entry"]
    assert (entry["knob"], entry["value"], entry["accepted"]) == ("instruction", BOXED, True)
    first, second = (read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet") for it in (1, 2))
    assert first["prompt"].str.contains("Explain your reasoning.", regex=False).all()
    assert (
        second["prompt"].str.contains(BOXED, regex=False).all()
        and not second["prompt"].str.contains("Explain", regex=False).any()
    )
    assert json.loads((out / "reports" / "iter_0002.json").read_text())["harness"]["in_force"]["instruction"] == BOXED
    asked = json.loads((out / "evals" / f"iter_{cfg.run.iterations:04d}.json").read_text())["instruction"]["math"]
    assert asked == BOXED  # the held-out evaluation asks with the instruction the checkpoint was trained under
    for it, version, instruction in ((1, "iter_0000", "Explain your reasoning."), (2, "iter_0001", BOXED)):
        trained_under = read_record(out / "checkpoints" / f"iter_{it:04d}")[
            "harness"
        ]  # the version in force and its values
        assert (
            trained_under["path"] == f"coevolver/{version}" and trained_under["in_force"]["instruction"] == instruction
        )
    from coevo.store.lineage import verify_lineage
    from coevo.store.lineage_cli import _details

    assert verify_lineage(out / "checkpoints" / "iter_0002") == []
    shown = dict(_details(read_record(out / "checkpoints" / "iter_0002")))["harness in force"]  # `coevo lineage`
    assert "coevolver/iter_0001" in shown and f"instruction={BOXED!r:.48}" in shown and "temperature=1.0" in shown
    meta = out / "checkpoints" / "iter_0002" / "coevo.json"  # a record naming another harness version is caught
    record = json.loads(meta.read_text())
    record["lineage"]["harness"]["content_hash"] = "0" * 64
    meta.write_text(json.dumps(record))
    assert [m.what for m in verify_lineage(out / "checkpoints" / "iter_0002")] == ["co-evolver version"]


def test_a_run_rescores_with_the_accepted_weight_of_a_misranking_shaping_term(tmp_path, monkeypatch):
    """A real run whose rewards add, at the verifier's weight, a term unrelated to correctness (an
    even last digit): a wrong even answer ties a right odd one. The rule is opened (min_gain 0:
    zeroing a nonnegative term can only rank fewer pairs wrong on the same samples) so the plumbing
    is what is checked: the backtest re-scores the same samples, and from iteration 2 the
    verification stage sums the components with the new weight."""
    from coevo.driver import train
    from schemas.rewards import COMPONENTS, read_rewards

    module = f"harness_shaping_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "def even(completions, **columns):\n    return [float(c.strip()[-1:] in tuple('02468')) for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    opened = {"collapse_share": 1.0, "truncation_share": 1.0, "misrank_share": 0.01, "min_gain": 0.0}
    rewards = [{"function": "verifier"}, {"function": f"{module}:even"}]
    cfg = tiny_config(
        tmp_path,
        rewards=rewards,
        coevolver={"kind": "harness", "harness": opened},
        bootstrap={"steps": 300},
        rollout={"problems_per_iter": 8, "group_size": 4},
    )
    train(cfg)
    out = cfg.run.out_dir
    entry = json.loads((out / "reports" / "iter_0001.json").read_text())["harness"].get("entry")
    assert entry and (entry["knob"], entry["from"], entry["value"], entry["accepted"]) == (
        "weight:even",
        1.0,
        0.0,
        True,
    ), entry
    assert (
        entry["before"]["pass_rate"] == entry["after"]["pass_rate"]
        and entry["after"]["misranked_share"] < entry["before"]["misranked_share"]
    )
    for it, weight in ((1, 1.0), (2, 0.0)):
        scored = read_rewards(out / "rewards" / f"iter_{it:04d}.parquet")
        parts = scored[COMPONENTS].map(json.loads)
        assert scored["reward"].tolist() == [c["verifier"] + weight * c["even"] for c in parts], f"iteration {it}"


def test_saved_harness_round_trips_and_refuses_unknown_knobs(tmp_path):
    h = harness()
    h.overrides, h.rejected_at = {"temperature": 0.4, "instruction": BOXED}, {"temperature=0.2": 3}
    h.save(tmp_path / "v1")
    assert load_coevolver(tmp_path / "v1", h.cfg, 0) == h
    state = json.loads((tmp_path / "v1" / HARNESS).read_text())
    state["overrides"]["top_k"] = 5
    Harness(h.cfg, 0).save(tmp_path / "v2")
    from coevo.coevolvers.base import save_artifact

    save_artifact(tmp_path / "v2", "harness", files={HARNESS: json.dumps(state).encode()})
    with pytest.raises(CoevolverDirError, match="harness.json: field 'overrides': unknown knobs \\['top_k'\\]"):
        load_coevolver(tmp_path / "v2", h.cfg, 0)
