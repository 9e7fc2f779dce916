"""A comparison spec (`coevo compare SPEC.yaml`): arms x seeds at one budget, read with line numbers.

    name: curriculum-vs-grpo      # optional; default the file's stem
    params: params.yaml           # optional; the params file of arms that name none
    seeds: [0, 1, 2]
    iterations: 30                # the budget: exactly one of iterations / train_seconds
    # train_seconds: 150          #   with max_iterations: M (every arm runs M iterations)
    eval_every: 10                # optional; the evaluation schedule of every arm (eval.every)
    reference: grpo               # optional; default the first arm
    set: {problems.n_test: 400}   # optional; dotted overrides of every arm, as `--set`
    tracking: {mlflow_uri: sqlite:///mlflow.db, experiment: coevo-compare}   # optional
    arms:
      - name: grpo
        set: {coevolver.kind: none}
      - name: curriculum
        params: params.yaml
        set: {coevolver.kind: curriculum}

Every mistake is a `SpecError` naming the spec file and line, raised before anything runs or is
written: an unknown key, no seeds, both or neither budget, two arms with one name, an override the
params tree rejects (each arm's params are validated here, for every seed), or an override of what
the comparison itself sets (`DECIDED`). Relative paths are read from the current directory, as every
`coevo` command reads `--params`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from coevo.config import CoevolverConfig, Config, ConfigError, TrackingConfig, deep_merge, error_lines
from coevo.errors import InputError
from coevo.io import hash_bytes
from coevo.problems.arithmetic import VAL_SPLITS, held_out_caps, held_out_quotas

TOP_KEYS = {
    "name",
    "params",
    "seeds",
    "iterations",
    "train_seconds",
    "max_iterations",
    "eval_every",
    "reference",
    "set",
    "tracking",
    "arms",
}
ARM_KEYS = {"name", "params", "set"}
TRACKING_KEYS = {"mlflow_uri", "experiment"}
# what the comparison sets in every arm run: an override of one of them is refused
DECIDED = ("seed", "run.out_dir", "run.iterations", "run.time_budget_s", "problems.data_dir", "eval.every", "tracking")


class SpecError(InputError):
    """A comparison spec that cannot run; the message names the file and line."""


@dataclass(frozen=True)
class Arm:
    name: str
    params: Path
    overrides: dict  # nested, as parse_overrides gives them
    line: int


@dataclass(frozen=True)
class Spec:
    path: Path
    name: str
    seeds: list[int]
    arms: list[Arm]
    reference: str
    iterations: int | None
    train_seconds: float | None
    max_iterations: int | None
    eval_every: int | None
    overrides: dict
    tracking: dict = field(default_factory=dict)
    sha256: str = ""  # of the spec file's bytes as read: what the seeds were fixed in (recorded by each run)

    @property
    def run_iterations(self) -> int:
        """Iterations every arm runs: the budget, or max_iterations under train_seconds."""
        return self.iterations if self.iterations is not None else self.max_iterations

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


def _lines(node: yaml.Node, path: tuple = (), out: dict | None = None, where: str = "") -> dict[tuple, int]:
    """1-based line of every mapping key and sequence item, by its path; a repeated key is an error."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for key, value in node.value:
            if key.value in seen:
                raise SpecError(f"{where}:{key.start_mark.line + 1}: key {key.value!r} appears twice in one mapping")
            seen.add(key.value)
            out[(*path, key.value)] = key.start_mark.line + 1
            _lines(value, (*path, key.value), out, where)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _lines(item, (*path, i), out, where)
    return out


def read_located(path: Path) -> tuple[dict, dict[tuple, int]]:
    """The spec's data and the line of each of its keys (yaml's composed nodes keep the marks)."""
    try:
        text = path.read_text()
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: cannot read the spec: {exc}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"{path}:1: a spec is a mapping (name, seeds, arms, a budget ...)")
    return data, _lines(node, where=str(path))


def nested(dotted: dict, where: str) -> dict:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    tree: dict = {}
    for key, value in dotted.items():
        node = tree
        *parents, leaf = str(key).split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpecError(f"{where}: {key!r} overrides a key that another override sets to a value")
        node[leaf] = value
    return tree


class _Reader:
    """Reads one spec, raising SpecError at the line of what is wrong."""

    def __init__(self, path: Path):
        self.path = path
        self.data, self.lines = read_located(path)

    def fail(self, at: tuple, message: str):
        while at and at not in self.lines:
            at = at[:-1]
        raise SpecError(f"{self.path}:{self.lines.get(at, 1)}: {message}")

    def unknown(self, mapping: dict, allowed: set, at: tuple, what: str) -> None:
        for key in mapping:
            if key not in allowed:
                self.fail((*at, key), f"unknown {what} key {key!r}; expected one of {', '.join(sorted(allowed))}")

    def overrides(self, at: tuple) -> dict:
        raw = self.data
        for part in at:
            raw = raw[part]
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.fail(at, "`set` is a mapping of dotted params keys to values, e.g. {coevolver.kind: none}")
        for key in raw:
            if any(str(key) == d or str(key).startswith(d + ".") for d in DECIDED):
                self.fail(
                    (*at, key),
                    (
                        f"{key!r} is set by the comparison itself (seed, run directory, iterations, data directory, "
                        f"evaluation schedule, tracking); leave it out"
                    ),
                )
        return nested(raw, f"{self.path}:{self.lines.get(at, 1)}")


def _positive(reader: _Reader, key: str, kind: type) -> int | float | None:
    value = reader.data.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not isinstance(value, int))
        or value <= 0
    ):
        reader.fail((key,), f"{key} must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    return value


def _seeds(reader: _Reader) -> list[int]:
    seeds = reader.data.get("seeds")
    if not seeds:
        reader.fail(
            ("seeds",) if "seeds" in reader.data else (), "no seeds: list at least one, e.g. `seeds: [0, 1, 2]`"
        )
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        reader.fail(("seeds",), f"seeds must be a list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        reader.fail(("seeds",), f"seeds repeat: {seeds}")
    return seeds


def _budget(reader: _Reader) -> tuple[int | None, float | None, int | None]:
    iterations, seconds = _positive(reader, "iterations", int), _positive(reader, "train_seconds", float)
    cap = _positive(reader, "max_iterations", int)
    if iterations is not None and seconds is not None:
        reader.fail(
            ("train_seconds",),
            (
                "both budgets given: set `iterations` (equal iterations) or `train_seconds` (equal measured training "
                "seconds), not both"
            ),
        )
    if iterations is None and seconds is None:
        reader.fail(
            (),
            "no budget: set `iterations: N` (equal iterations) or `train_seconds: S` (equal measured training seconds)",
        )
    if seconds is not None and cap is None:
        reader.fail(
            ("train_seconds",),
            (
                "train_seconds needs max_iterations: the iterations every arm runs, long enough for its measured "
                "training seconds to pass train_seconds"
            ),
        )
    if iterations is not None and cap is not None:
        reader.fail(
            ("max_iterations",),
            "max_iterations goes with train_seconds; under `iterations` every arm runs exactly that many",
        )
    return iterations, seconds, cap


def _arms(reader: _Reader, default_params: Path) -> list[Arm]:
    arms = reader.data.get("arms")
    if not isinstance(arms, list) or not arms:
        reader.fail(("arms",), "arms: list at least one arm ({name, params, set})")
    out: list[Arm] = []
    for i, raw in enumerate(arms):
        if not isinstance(raw, dict):
            reader.fail(("arms", i), "an arm is a mapping with keys name, params, set")
        reader.unknown(raw, ARM_KEYS, ("arms", i), "arm")
        name = raw.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in "/\\ ") or name.startswith("."):
            reader.fail(
                ("arms", i, "name") if "name" in raw else ("arms", i),
                f"each arm needs a name (no '/', '\\' or spaces), got {name!r}",
            )
        if any(a.name == name for a in out):
            reader.fail(
                ("arms", i, "name"),
                (
                    f"two arms are named {name!r} (the first at line {next(a.line for a in out if a.name == name)}); "
                    f"arm names must differ"
                ),
            )
        params = Path(raw["params"]) if raw.get("params") else default_params
        out.append(
            Arm(name, params, reader.overrides(("arms", i, "set")) if "set" in raw else {}, reader.lines[("arms", i)])
        )
    return out


def load_spec(path: str | Path) -> Spec:
    """Read and check a spec; every arm's params are validated for every seed (`arm_config`)."""
    reader = _Reader(Path(path))
    data = reader.data
    reader.unknown(data, TOP_KEYS, (), "spec")
    seeds = _seeds(reader)
    iterations, seconds, cap = _budget(reader)
    eval_every = _positive(reader, "eval_every", int)
    tracking = data.get("tracking") or {}
    if not isinstance(tracking, dict):
        reader.fail(("tracking",), "tracking is a mapping with mlflow_uri and/or experiment")
    reader.unknown(tracking, TRACKING_KEYS, ("tracking",), "tracking")
    arms = _arms(reader, Path(data.get("params") or "params.yaml"))
    reference = data.get("reference", arms[0].name)
    if reference not in [a.name for a in arms]:
        reader.fail(("reference",), f"reference {reference!r} is not an arm (arms: {', '.join(a.name for a in arms)})")
    spec = Spec(
        Path(path),
        str(data.get("name") or Path(path).stem),
        seeds,
        arms,
        reference,
        iterations,
        seconds,
        cap,
        eval_every,
        reader.overrides(("set",)) if "set" in data else {},
        tracking,
        hash_bytes(Path(path).read_bytes()),
    )
    for i, arm in enumerate(spec.arms):
        for seed in seeds:
            check_arm(reader, spec, arm, i, seed)
    return spec


def check_arm(reader: _Reader, spec: Spec, arm: Arm, index: int, seed: int) -> None:
    """Validate the arm's params for `seed`; an error names the line of the override it concerns."""
    if not arm.params.is_file():
        reader.fail(
            ("arms", index, "params") if ("arms", index, "params") in reader.lines else ("params",),
            f"arm {arm.name!r}: params file {arm.params} not found",
        )
    try:
        arm_config(spec, arm, seed, Path("compare-check"))
    except ConfigError as exc:
        at = ("arms", index)
        cause = exc.__cause__
        if isinstance(cause, ValidationError):
            loc = ".".join(str(p) for p in cause.errors()[0]["loc"])
            for scope in (("arms", index, "set"), ("set",)):
                keys = [k for (*p, k) in [key for key in reader.lines if tuple(key[:-1]) == scope]]
                hit = next((k for k in keys if loc == k or loc.startswith(f"{k}.") or k.startswith(f"{loc}.")), None)
                if hit is not None:
                    at = (*scope, hit)
                    break
        reader.fail(at, f"arm {arm.name!r} (seed {seed}): its params do not validate:\n{exc}")


def raw_params(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc


def arm_overrides(spec: Spec, arm: Arm, seed: int, run_dir: Path) -> dict:
    """What the comparison lays over the arm's params file: the spec's `set`, the arm's `set`, then
    the decided keys (seed, run directory and its data directory, iterations, schedule, tracking)."""
    ref_tracking = reference_tracking(spec)
    decided = {
        "seed": seed,
        "run": {"out_dir": str(run_dir), "iterations": spec.run_iterations, "time_budget_s": None},
        "problems": {"data_dir": str(run_dir / "data")},
        "tracking": {**ref_tracking, "model_name": f"{ref_tracking['model_name']}-{spec.name}-{arm.name}"},
    }
    if spec.eval_every is not None:
        decided["eval"] = {"every": spec.eval_every}
    return deep_merge(deep_merge(spec.overrides, arm.overrides), decided)


def reference_tracking(spec: Spec) -> dict:
    """The comparison's MLflow store and experiment: the spec's `tracking`, else the reference arm's
    params (its tracking.mlflow_uri; experiment 'coevo-compare')."""
    ref = spec.arm(spec.reference)
    raw = deep_merge(deep_merge(raw_params(ref.params), spec.overrides), ref.overrides).get("tracking") or {}
    defaults = TrackingConfig()
    return {
        "mlflow_uri": spec.tracking.get("mlflow_uri", raw.get("mlflow_uri", defaults.mlflow_uri)),
        "experiment": spec.tracking.get("experiment", "coevo-compare"),
        "model_name": raw.get("model_name", defaults.model_name),
    }


def arm_config(spec: Spec, arm: Arm, seed: int, run_dir: Path) -> Config:
    """The validated Config of one arm run (ConfigError, chained to the ValidationError, if not)."""
    raw = deep_merge(raw_params(arm.params), arm_overrides(spec, arm, seed, run_dir))
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(error_lines(arm.params, exc)) from exc


def identity(cfg: Config) -> str:
    """What an arm run computes, whatever its directory or tracking store: the hash of its params
    without run.out_dir, problems.data_dir and tracking (a run made elsewhere merges when it matches)."""
    return _hash(_identity_params(cfg))


def _without_cpu_threads(params: dict) -> bool:
    """engine.cpu_threads dropped where it is null (vLLM's own binding: what ran before it existed);
    False where it binds cores, a computation no earlier run made."""
    if params["engine"].get("cpu_threads") is not None:
        return False
    params["engine"].pop("cpu_threads", None)
    return True


def _without_backtest_before(params: dict) -> bool:
    """coevolver.harness.backtest_before dropped from every co-evolver entry, where no harness runs with
    anything but `resample` (the backtest before it existed; without a harness no value is read)."""
    entries = _coevolver_entries(params)
    if any(e["kind"] == "harness" and e["harness"].get("backtest_before", "resample") != "resample" for e in entries):
        return False
    for entry in entries:
        entry["harness"].pop("backtest_before", None)
    return True


def _coevolver_entries(params: dict) -> list[dict]:
    """Every co-evolver entry of the params, in either spelling (`coevolver` a mapping or a list, or
    the earlier `coevolvers`)."""
    return [
        entry
        for key in ("coevolver", "coevolvers")
        for entry in (params.get(key) if isinstance(params.get(key), list) else [params.get(key)])
        if isinstance(entry, dict)
    ]


def _without_val_split(params: dict) -> bool:
    """problems.val_split dropped where it makes the splits runs made before it made (test first,
    validation after): its value is `after_test`, the source is not arithmetic, or both rules give
    every cell the same test and validation quotas."""
    problems = params["problems"]
    if problems.get("val_split", "after_test") != "after_test" and problems["source"] == "arithmetic":
        levels = list(range(problems["min_digits"], problems["max_digits"] + 1))
        caps = held_out_caps(problems["families"], levels, problems["n_train"])
        by_rule = [held_out_quotas(caps, problems["n_test"], problems["n_val"], rule) for rule in VAL_SPLITS]
        if by_rule[0] != by_rule[1]:
            return False
    problems.pop("val_split", None)
    return True


def _without_dynamic_sampling(params: dict) -> bool:
    """rollout.dynamic_sampling dropped where it is off (every run made before it existed)."""
    if params["rollout"].get("dynamic_sampling", {}).get("enabled", False):
        return False
    params["rollout"].pop("dynamic_sampling", None)
    return True


def _runs_episodes(params: dict) -> bool:
    """Whether params sample episodes: tools or an environment class (`Config.episodes` on the dump)."""
    return bool(params.get("tools") or (params.get("environment") or {}).get("factory"))


def _without_episodes(params: dict) -> bool:
    """`tools` and `environment` dropped where no episode runs (every run made before they existed
    sampled one turn without tools)."""
    if _runs_episodes(params):
        return False
    params.pop("tools", None)
    params.pop("environment", None)
    return True


def _without_guess_levels(params: dict) -> bool:
    """problems.guess_levels dropped where the source is not the guessing games (every run made before
    it existed; no other source reads it)."""
    if params["problems"]["source"] == "guessing":
        return False
    params["problems"].pop("guess_levels", None)
    return True


def _without_tool_calls(params: dict) -> bool:
    """bootstrap.tool_calls dropped where it demonstrates nothing (steps 0: every run made before it existed)."""
    if params["bootstrap"].get("tool_calls", {}).get("steps", 0):
        return False
    params["bootstrap"].pop("tool_calls", None)
    return True


def _without_roles(params: dict) -> bool:
    """rollout.roles, rollout.train_roles, code.cure.truth, prompt.instruction.tester and
    coevolver.unit_tests dropped, and the
    removed code loop's settings put back as every run made before held them (their defaults; no
    committed spec set one), where the solver is the one role (every run made before roles existed)."""
    if params["rollout"].get("roles", ["solver"]) != ["solver"]:
        return False
    params["rollout"].pop("roles", None)
    params["rollout"].pop("train_roles", None)
    params["code"]["cure"].pop("truth", None)
    params["prompt"]["instruction"].pop("tester", None)
    params["code"]["cure"]["bank_max_per_problem"] = 8
    params["code"] |= {"iterations": 20, "problems_per_iter": 8, "group_size": 8, "train_roles": ["coder", "tester"]}
    for entry in _coevolver_entries(params):
        entry.pop("unit_tests", None)
    return True


def _without_harness_turns(params: dict) -> bool:
    """coevolver.harness.turn_limit_share and max_turns dropped where no harness runs on episodes (every
    run made before they existed; the turn limit is a knob only there)."""
    entries = _coevolver_entries(params)
    if _runs_episodes(params) and any(e["kind"] == "harness" for e in entries):
        return False
    for entry in entries:
        entry["harness"].pop("turn_limit_share", None)
        entry["harness"].pop("max_turns", None)
    return True


def _with_drop_below(params: dict) -> bool:
    """coevolver.curriculum.proposer.drop_below put back as every run made before its removal held it
    (0.05, the default; no committed spec set another). No value of it changed a choice."""
    for entry in _coevolver_entries(params):
        entry["curriculum"]["proposer"]["drop_below"] = 0.05
    return True


# The params' history since the committed runs were made, oldest change first: each step turns params
# as they are written after its change into params as runs made before it held them (a setting
# dropped, a removed one put back), returning False where the params compute what no run before the
# change computed.
HISTORY = (
    _without_cpu_threads,
    _without_backtest_before,
    _without_val_split,
    _with_drop_below,
    _without_dynamic_sampling,
    _without_episodes,
    _without_guess_levels,
    _without_tool_calls,
    _without_roles,
    _without_harness_turns,
)


def identities(cfg: Config) -> set[str]:
    """The identities a finished run of `cfg` may carry in its marker: `identity(cfg)`, the hash of the
    same params in their earlier spelling (from before `coevolvers`, a list, was folded into
    `coevolver` and `eval.with_skills` became `eval.with_context`), and the hash of each of the two as
    a run made before each change in `HISTORY` held them, walking back until a change computes
    something no earlier run did. Runs finished before then (the committed ones under bench/results)
    carry one of these; all name the same computation."""
    current = _identity_params(cfg)
    earlier = copy.deepcopy(current)
    entries = earlier["coevolver"]  # one co-evolver dumps as its mapping, several as the list
    several = isinstance(entries, list)
    earlier["coevolver"] = CoevolverConfig().model_dump(mode="json") if several else entries
    earlier["coevolvers"] = entries if several else None
    earlier["eval"]["with_skills"] = earlier["eval"].pop("with_context")
    found = set()
    for params in (current, earlier):
        found.add(_hash(params))
        for step in reversed(HISTORY):  # a run from before change k holds the params before k and every later one
            if not step(params):
                break
            found.add(_hash(params))
    return found


def _identity_params(cfg: Config) -> dict:
    return cfg.model_dump(mode="json", exclude={"run": {"out_dir"}, "problems": {"data_dir"}, "tracking": True})


def _hash(params: dict) -> str:
    return hash_bytes(json.dumps(params, sort_keys=True).encode())
