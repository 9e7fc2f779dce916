"""Lineage: what every checkpoint was made from, and a check that it still is.

Each checkpoint's coevo.json carries a "lineage" record (built by `lineage_record`, passed to
`save_checkpoint` in its meta): the sha256 of its parent's weights, of the rollouts and rewards shards
it trained on, the content hash of the co-evolver version, the sha256 of every problem data file (and
DVC's md5 of the data dir when DVC tracks it), the sha256 of the canonical JSON of the validated
params (with the values themselves), the code version (git commit, dirty flag, coevo version), and
the source file and sha256 of each reward plugin the params name (`reward_plugins`), and for a
LoRA checkpoint its base model directory and weights sha256 ("base", checked by `_check_base`).
A checkpoint written without an optimizer step copies its parent's files ("unchanged_from"), each
copy checked against the parent's recorded sha256 (coevo/model/checkpoint.py), so a damaged parent is
named by the save, never vouched for by its child.
The bootstrap's record also names the user checkpoint it was copied from ("source", policy.checkpoint)
with that directory's `import.json` when `coevo import-model` wrote it (source GGUF sha256, package).

Paths inside the run directory are stored relative to it, and the run directory relative to the
checkpoint ("run_dir", normally "../.."), so a whole run directory can be moved and still verify;
paths outside it are absolute. `lineage_chain` walks parent links back to the bootstrap;
`verify_lineage` recomputes every hash along the chain and lists each mismatch.

Departures from "recompute every hash":
1. DVC's md5 is recorded, not recomputed (the data files' own sha256 are checked instead).
2. A checkpoint's trainer_state.pt is not checked: save_checkpoint leaves it out of "files" (it is
   training state, and the pipeline deletes it from all but the newest checkpoint).
3. A checkpoint pruned by retention (coevo/model/retention.py) lacks its weight files: a listed file
   that is absent passes when the checkpoint's pruned.json names it with the sha256 coevo.json
   recorded (a parent link to it is checked against that recorded hash); the chain reports it pruned.
   The same holds for the co-evolver version of a pruned checkpoint (its pruned.json against its
   manifest); the manifest and its content hash are still checked against the record.
4. Of a source checkpoint only an imported one is checked (its weights against its import record);
   the GGUF file it was converted from is recorded, not rehashed (it may live in a package).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from coevo.coevolvers.base import MANIFEST, content_hash, read_manifest
from coevo.config import Config
from coevo.errors import InputError
from coevo.io import hash_bytes, hash_file
from coevo.layout import RunLayout
from coevo.model.checkpoint import META, PRUNED, TRAINER_STATE, WEIGHTS, read_meta, read_pruned, weights_file
from coevo.model.import_model import read_import_record
from coevo.records import Splits
from coevo.rollout.episodes import episode_sources
from coevo.tracking.dvc import dvc_dir_md5
from coevo.verification.rewards import reward_sources

MODEL_URI = "models:/"
CHECKPOINT_TAG = "coevo.checkpoint_path"  # model-version tag holding the local checkpoint dir
MISSING = "missing"


@dataclass(frozen=True)
class Mismatch:
    path: str  # the file or directory whose hash disagrees
    what: str  # "checkpoint file", "parent link", "rollouts shard", "co-evolver file", "data", "params", ...
    expected: str  # what the record says
    actual: str  # what is there now ("missing" when absent)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


# ---- building a record ----


def lineage_record(
    run_dir: Path,
    iteration: int,
    parent: Path | None,
    rollouts: Path | None,
    rewards: Path | None,
    coevolver: Path | None,
    data: dict[str, Path],
    dvc_md5: str | None,
    params: dict,
    checkpoint_dir: Path | None = None,
    source: Path | None = None,
    reward_plugins: list[dict] | None = None,
    base: Path | None = None,
    episode_plugins: list[dict] | None = None,
    harness: tuple[Path, dict] | None = None,
) -> dict:
    """The lineage record of the checkpoint of `iteration`, to be saved at `checkpoint_dir`
    (default run_dir/checkpoints/iter_NNNN). Hashes are computed now, from the files on disk, except
    the reward plugins' and the episodes' tools and environment class ({"function", "path", "sha256"}: their
    source when imported, coevo/plugins.py).
    `source`: the user checkpoint (policy.checkpoint) the bootstrap was copied from, if any.
    `harness`: the co-evolver version whose harness the checkpoint was trained under (the parent's,
    coevo/coevolvers/harness.py) and the values it put in force (params' `values` are what the user set)."""
    run_dir = Path(run_dir).resolve()
    target = Path(checkpoint_dir).resolve() if checkpoint_dir else run_dir / "checkpoints" / f"iter_{iteration:04d}"
    if "dvc_md5" in data:
        raise ValueError("'dvc_md5' is reserved in the lineage data section; rename that data file")
    return {
        "iteration": iteration,
        "run_dir": os.path.relpath(run_dir, target),
        "parent": None
        if parent is None
        else {"path": _store(run_dir, parent), "weights_sha256": _weights_hash(Path(parent))},
        "rollouts": _file_entry(run_dir, rollouts),
        "rewards": _file_entry(run_dir, rewards),
        "coevolver": _coevolver_entry(run_dir, coevolver),
        "data": {**{name: _file_entry(run_dir, path) for name, path in sorted(data.items())}, "dvc_md5": dvc_md5},
        "params": {"sha256": params_hash(params), "values": params},
        "code": code_version(),
        "source": None if source is None else _source_entry(run_dir, Path(source)),
        "reward_plugins": [
            {**plugin, "path": plugin["path"] and _store(run_dir, Path(plugin["path"]))}
            for plugin in reward_plugins or []
        ],
        "episode_plugins": [
            {**plugin, "path": plugin["path"] and _store(run_dir, Path(plugin["path"]))}
            for plugin in episode_plugins or []
        ],
        "base": None
        if base is None
        else {"path": _store(run_dir, Path(base)), "weights_sha256": _weights_hash(Path(base))},
        "harness": None if harness is None else {**_coevolver_entry(run_dir, harness[0]), "in_force": harness[1]},
    }


def params_hash(params: dict) -> str:
    """sha256 of the canonical JSON of `params` (sorted keys, no whitespace)."""
    return hash_bytes(json.dumps(params, sort_keys=True, separators=(",", ":"), default=str).encode())


def code_version() -> dict:
    """git commit and dirty flag of the current directory (None outside a git repo) and coevo's version."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain") if commit is not None else None
    try:
        coevo_version = version("coevo")
    except PackageNotFoundError:
        coevo_version = None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status), "coevo_version": coevo_version}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _store(run_dir: Path, path: Path) -> str:
    """`path` relative to the run dir when inside it, else absolute (posix form)."""
    resolved = Path(path).resolve()
    return resolved.relative_to(run_dir).as_posix() if resolved.is_relative_to(run_dir) else resolved.as_posix()


def _file_entry(run_dir: Path, path: Path | None) -> dict | None:
    return None if path is None else {"path": _store(run_dir, path), "sha256": hash_file(path)}


def _coevolver_entry(run_dir: Path, directory: Path | None) -> dict | None:
    if directory is None:
        return None
    manifest = read_manifest(directory)
    entry = {"path": _store(run_dir, directory), "content_hash": manifest["content_hash"], "kind": manifest["kind"]}
    if "members" in manifest:  # a list of co-evolvers: each member's kind and version
        entry["members"] = [
            {"kind": member["kind"], "content_hash": member["content_hash"]} for member in manifest["members"]
        ]
    return entry


def _source_entry(run_dir: Path, directory: Path) -> dict:
    """Where the bootstrap's weights came from, with the `coevo import-model` record when it has one."""
    return {"path": _store(run_dir, directory), "import": read_import_record(directory)}


def _weights_hash(checkpoint: Path) -> str:
    weights_hash = read_meta(checkpoint).get("weights_sha256")
    if not weights_hash:
        raise ValueError(f"{checkpoint / META}: no weights_sha256; is {checkpoint} a coevo checkpoint?")
    return weights_hash


# ---- reading the chain ----


def read_record(checkpoint: Path) -> dict:
    """The lineage record in `checkpoint`/coevo.json; ValueError naming the file when there is none."""
    path = Path(checkpoint) / META
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the checkpoint metadata: {exc}") from exc
    if not isinstance(meta.get("lineage"), dict):
        raise ValueError(f"{path}: has no lineage record")
    return meta["lineage"]


def locate(checkpoint: Path, record: dict, stored: str) -> Path:
    """The path a record stored (relative to its run dir, or absolute), seen from `checkpoint`."""
    path = Path(stored)
    if path.is_absolute():
        return path
    return Path(os.path.normpath(Path(checkpoint).resolve() / record.get("run_dir", "../..") / path))


def lineage_chain(checkpoint: Path) -> list[dict]:
    """This checkpoint, its parent, ... back to the bootstrap (whose parent is None).

    Entries: {"checkpoint", "weights_sha256", "lineage", "missing", "pruned", "coevolver_pruned"}
    (pruned: retention deleted its weights, its metadata is there; coevolver_pruned: likewise the
    files of the co-evolver version its record names, whose manifest is there). A parent directory that is gone
    ends the chain with an entry marked missing (its weights_sha256 is the one its child recorded);
    a parent without a readable lineage record ends it with "lineage" None.
    """
    head = Path(os.path.normpath(Path(checkpoint).resolve()))
    record = read_record(head)
    chain = [
        {
            "checkpoint": str(head),
            "weights_sha256": _weights_hash(head),
            "lineage": record,
            "missing": False,
            "pruned": (head / PRUNED).is_file(),
        }
    ]
    chain[0]["coevolver_pruned"] = _coevolver_pruned(head, record)
    while chain[-1]["lineage"] and chain[-1]["lineage"].get("parent"):
        child = chain[-1]
        link = child["lineage"]["parent"]
        path = locate(Path(child["checkpoint"]), child["lineage"], link["path"])
        if any(entry["checkpoint"] == str(path) for entry in chain):
            raise ValueError(f"{path}: lineage cycle (the checkpoint is its own ancestor)")
        chain.append(_parent_entry(path, link["weights_sha256"]))
    return chain


def _parent_entry(path: Path, recorded_weights: str) -> dict:
    if not path.is_dir():
        return {
            "checkpoint": str(path),
            "weights_sha256": recorded_weights,
            "lineage": None,
            "missing": True,
            "pruned": False,
            "coevolver_pruned": False,
        }
    try:
        meta = json.loads((path / META).read_text())
    except (OSError, json.JSONDecodeError):
        meta = {}
    lineage = meta.get("lineage") if isinstance(meta.get("lineage"), dict) else None
    pruned = (path / PRUNED).is_file()
    return {
        "checkpoint": str(path),
        "weights_sha256": meta.get("weights_sha256"),
        "lineage": lineage,
        "missing": False,
        "pruned": pruned,
        "coevolver_pruned": _coevolver_pruned(path, lineage),
    }


def _coevolver_pruned(checkpoint: Path, record: dict | None) -> bool:
    """Whether retention pruned the files of the co-evolver version `record` names (its marker is there)."""
    if not record or not record.get("coevolver"):
        return False
    return (locate(checkpoint, record, record["coevolver"]["path"]) / PRUNED).is_file()


# ---- verifying the chain ----


class _Hashes:
    """sha256 of files, each computed once per verification ("missing" for an absent file)."""

    def __init__(self) -> None:
        self._seen: dict[Path, str] = {}

    def __call__(self, path: Path) -> str:
        if path not in self._seen:
            self._seen[path] = hash_file(path) if path.is_file() else MISSING
        return self._seen[path]


def verify_lineage(checkpoint: Path) -> list[Mismatch]:
    """Recompute every hash along the chain; one Mismatch per disagreement (none: the lineage holds)."""
    hashes = _Hashes()
    found: list[Mismatch] = []
    for entry in lineage_chain(checkpoint):
        if entry["missing"]:
            continue  # its child's parent link reports it
        path = Path(entry["checkpoint"])
        found += _check_checkpoint(path, hashes)
        if entry["lineage"] is None:
            found.append(Mismatch(str(path / META), "lineage record", "a lineage record", MISSING))
        else:
            found += _check_record(path, entry["lineage"], hashes)
    return list(dict.fromkeys(found))  # a data file shared by every checkpoint is reported once


def _check_file(path: Path, expected: str, what: str, hashes: _Hashes) -> list[Mismatch]:
    actual = hashes(path)
    return [] if actual == expected else [Mismatch(str(path), what, expected, actual)]


def _check_listing(
    directory: Path, listed: dict, what: str, hashes: _Hashes, unlisted_ok: tuple[str, ...]
) -> list[Mismatch]:
    """Each listed file against its sha256 (the `unlisted_ok` may also be absent), and each file present
    but not listed, except the `unlisted_ok`."""
    present = {p.relative_to(directory).as_posix(): p for p in directory.rglob("*") if p.is_file()}
    found: list[Mismatch] = []
    for name, expected in sorted(listed.items()):
        if name in present or name not in unlisted_ok:
            found += _check_file(directory / name, expected, what, hashes)
    for name in sorted(set(present) - set(listed) - set(unlisted_ok)):
        found.append(Mismatch(str(present[name]), what, "not listed", hashes(present[name])))
    return found


def _check_checkpoint(path: Path, hashes: _Hashes) -> list[Mismatch]:
    listed = read_meta(path).get("files")
    if not isinstance(listed, dict):
        return [Mismatch(str(path / META), "checkpoint file", "a files listing", MISSING)]
    found, pruned = _check_pruned(path, listed)
    remaining = {name: sha for name, sha in listed.items() if name not in pruned or (path / name).is_file()}
    return found + _check_listing(path, remaining, "checkpoint file", hashes, unlisted_ok=(META, TRAINER_STATE, PRUNED))


def _check_pruned(path: Path, listed: dict) -> tuple[list[Mismatch], set[str]]:
    """The files retention pruned from `path` (its pruned.json) whose hash agrees with coevo.json's
    listing, and a Mismatch for each that disagrees (or for an unreadable marker)."""
    try:
        marker = read_pruned(path)
    except (OSError, json.JSONDecodeError) as exc:
        return [Mismatch(str(path / PRUNED), "pruned marker", "a readable pruned.json", f"unreadable: {exc}")], set()
    found, pruned = [], set()
    for name, sha in sorted((marker or {}).get("files", {}).items()):
        if name in listed and listed[name] != sha:
            found.append(Mismatch(str(path / name), "pruned file", listed[name], f"{sha} (in {PRUNED})"))
        else:
            pruned.add(name)
    return found, pruned


def _parent_weights(parent: Path, hashes: _Hashes) -> str:
    """The sha256 of a parent's weights: of the file, or, when retention pruned it, the one its
    pruned.json records (checked against the parent's own listing when the chain reaches it)."""
    weights = weights_file(parent)  # the adapter's for a LoRA checkpoint
    if weights.is_file() or not (parent / PRUNED).is_file():
        return hashes(weights)
    try:
        return (read_pruned(parent) or {}).get("files", {}).get(weights.name, MISSING)
    except (OSError, json.JSONDecodeError):
        return MISSING


def _check_record(checkpoint: Path, record: dict, hashes: _Hashes) -> list[Mismatch]:
    """The record's parent link, shards, co-evolver, data and params against what is on disk now."""
    found: list[Mismatch] = []
    if record.get("parent"):
        parent = locate(checkpoint, record, record["parent"]["path"])
        actual = _parent_weights(parent, hashes)
        if actual != record["parent"]["weights_sha256"]:
            found.append(Mismatch(str(parent), "parent link", record["parent"]["weights_sha256"], actual))
    for key in ("rollouts", "rewards"):
        if record.get(key):
            found += _check_file(
                locate(checkpoint, record, record[key]["path"]), record[key]["sha256"], f"{key} shard", hashes
            )
    for key in ("coevolver", "harness"):
        if record.get(key):
            found += _check_coevolver(locate(checkpoint, record, record[key]["path"]), record[key], hashes)
    found += _check_data(checkpoint, record, hashes)
    found += _check_source(checkpoint, record, hashes)
    found += _check_base(checkpoint, record, hashes)
    for kind, plugin in [
        *(("reward plugin", p) for p in record.get("reward_plugins", [])),
        *(("tool or environment", p) for p in record.get("episode_plugins", [])),
    ]:
        if plugin["path"]:
            found += _check_file(
                locate(checkpoint, record, plugin["path"]), plugin["sha256"], f"{kind} {plugin['function']}", hashes
            )
    actual_params = params_hash(record["params"]["values"])
    if actual_params != record["params"]["sha256"]:
        found.append(Mismatch(str(checkpoint / META), "params", record["params"]["sha256"], actual_params))
    return found


def _check_data(checkpoint: Path, record: dict, hashes: _Hashes) -> list[Mismatch]:
    """Each data file's sha256, and DVC's hash of the directory holding the train split."""
    data, found = record.get("data", {}), []
    files = {name: entry for name, entry in sorted(data.items()) if name != "dvc_md5" and entry}
    for entry in files.values():
        found += _check_file(locate(checkpoint, record, entry["path"]), entry["sha256"], "data", hashes)
    if data.get("dvc_md5") and "train" in files:
        directory = locate(checkpoint, record, files["train"]["path"]).parent
        actual = dvc_dir_md5(directory) if directory.is_dir() else MISSING
        if actual != data["dvc_md5"]:
            found.append(Mismatch(str(directory), "data (DVC hash)", data["dvc_md5"], actual))
    return found


def _check_source(checkpoint: Path, record: dict, hashes: _Hashes) -> list[Mismatch]:
    """An imported source checkpoint's weights against its import record (other sources are only named)."""
    source = record.get("source") or {}
    if not source.get("import"):
        return []
    return _check_file(
        locate(checkpoint, record, source["path"]) / WEIGHTS,
        source["import"]["weights_sha256"],
        "source checkpoint",
        hashes,
    )


def _check_base(checkpoint: Path, record: dict, hashes: _Hashes) -> list[Mismatch]:
    """A LoRA checkpoint's base model weights against the sha256 recorded when it was trained."""
    base = record.get("base")
    if not base:
        return []
    return _check_file(
        weights_file(locate(checkpoint, record, base["path"])), base["weights_sha256"], "base model", hashes
    )


def _check_coevolver(directory: Path, entry: dict, hashes: _Hashes) -> list[Mismatch]:
    """Each file against the manifest, the manifest against its content hash, and that against the record."""
    try:
        manifest = read_manifest(directory)
    except ValueError:
        return [Mismatch(str(directory / MANIFEST), "co-evolver version", entry["content_hash"], MISSING)]
    listed = manifest.get("files", {})
    found, pruned = _check_pruned(directory, listed)  # retention pruned it with its checkpoint
    remaining = {name: sha for name, sha in listed.items() if name not in pruned or (directory / name).is_file()}
    found += _check_listing(directory, remaining, "co-evolver file", hashes, unlisted_ok=(MANIFEST, PRUNED))
    if content_hash(listed) != manifest.get("content_hash"):
        found.append(
            Mismatch(
                str(directory / MANIFEST),
                "co-evolver manifest",
                str(manifest.get("content_hash")),
                content_hash(listed),
            )
        )
    if manifest.get("content_hash") != entry["content_hash"]:
        found.append(
            Mismatch(str(directory), "co-evolver version", entry["content_hash"], str(manifest.get("content_hash")))
        )
    if manifest.get("kind") != entry["kind"]:
        found.append(Mismatch(str(directory), "co-evolver kind", entry["kind"], str(manifest.get("kind"))))
    return found


# ---- finding a checkpoint ----


def resolve_checkpoint(ref: str, tracking_uri: str | None = None) -> Path:
    """A checkpoint directory from a path or an MLflow model URI (models:/NAME@ALIAS, models:/NAME/VERSION).

    A registered version points at its local directory through the tag "coevo.checkpoint_path".
    """
    if not ref.startswith(MODEL_URI):
        if not Path(ref).is_dir():
            raise FileNotFoundError(f"{ref}: no such checkpoint directory")
        return Path(ref)
    model_version = _model_version(ref, tracking_uri)
    label = f"{ref} (model {model_version.name!r} version {model_version.version})"
    stored = (model_version.tags or {}).get(CHECKPOINT_TAG)
    if not stored:
        raise InputError(f"{label}: has no {CHECKPOINT_TAG!r} tag, so no local checkpoint directory is known")
    if not Path(stored).is_dir():
        raise FileNotFoundError(f"{label}: its checkpoint directory {stored} does not exist")
    return Path(stored)


def _model_version(ref: str, tracking_uri: str | None):
    """The registry's ModelVersion for `ref`; ValueError for a malformed URI or an unknown model/alias/version."""
    import mlflow  # heavy; only model URIs need it
    from mlflow.exceptions import MlflowException

    body = ref[len(MODEL_URI) :]
    name, at, key = body.rpartition("@")  # key: an alias after "@", else a version number after "/"
    if not at:
        name, _, key = body.rpartition("/")
    if not name or not key or (not at and not key.isdigit()):
        raise InputError(f"{ref}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    where = tracking_uri or mlflow.get_tracking_uri()
    store = where.removeprefix("sqlite:///") if where.startswith("sqlite:///") else None
    if store is not None and not Path(store).is_file():  # a lookup must not create an empty registry
        raise InputError(
            f"{ref}: no model registry at {where} ({Path(store).resolve()} does not exist; set "
            f"tracking.mlflow_uri, or --tracking-uri for coevo lineage)"
        )
    client = mlflow.MlflowClient(tracking_uri)
    try:
        return client.get_model_version_by_alias(name, key) if at else client.get_model_version(name, key)
    except MlflowException as exc:
        raise InputError(f"{ref}: not found in the model registry at {where}: {exc.message}") from exc


def checkpoint_lineage(
    cfg: Config,
    it: int,
    parent,
    rollouts,
    rewards,
    coevolver,
    data: Splits,
    base: Path | None = None,
    harness: dict | None = None,
) -> dict:
    """The lineage record of checkpoint `it`; `harness`: `InForce.harness` of the iteration that trained it."""
    return lineage_record(
        run_dir=cfg.run.out_dir,
        iteration=it,
        parent=parent,
        rollouts=rollouts,
        rewards=rewards,
        coevolver=coevolver,
        data={name: Path(getattr(data, name).path) for name in ("train", "val", "test")},
        dvc_md5=data.dvc_md5,
        params=cfg.model_dump(mode="json"),
        checkpoint_dir=RunLayout(cfg.run.out_dir).checkpoint(it),
        source=cfg.policy.checkpoint if it == 0 else None,  # the bootstrap copies the user's checkpoint
        reward_plugins=reward_sources(cfg),
        base=base,  # a LoRA checkpoint's base model
        episode_plugins=episode_sources(cfg),
        harness=None if harness is None else (Path(harness["path"]), harness["in_force"]),
    )
