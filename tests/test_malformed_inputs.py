"""Malformed inputs, catalogued: one test per row of the "Malformed inputs" table
(docs/operations/malformed-inputs.md).

Each row feeds one kind of bad input to the real command (typer's CliRunner on `coevo.cli.app`: its
exit code, and no exception escaping it, i.e. no traceback) or to the library call behind it,
asserts the message names what is wrong (file, row, field, params key, directory), and asserts that
nothing half-written was left. The table's rows and the `ROWS` ids below are the same list, in the
same order (checked by the last test).
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app

from .conftest import ROOT, TINY, TINY_PARAMS, tiny_config

MALFORMED_INPUTS_PAGE = ROOT / "docs" / "operations" / "malformed-inputs.md"  # the table the tests mirror

PROBLEMS_OK = (
    '{"id": "a", "prompt": "1+1=", "answer": 2}\n{"id": "b", "prompt": "2+2=", "answer": 4}\n{"id": "c", "prompt": '
    '"3+3=", "answer": 6}\n'
)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A tiny bootstrapped run (checkpoint 0 with its lineage, co-evolver iter_0000), built once."""
    from coevo.stages.prepare import bootstrap_stage, prepare_stage

    cfg = tiny_config(tmp_path_factory.mktemp("malformed"), bootstrap={"steps": 2})  # its quality does not matter
    data = prepare_stage(cfg)
    boot = bootstrap_stage(cfg, data)
    return {"cfg": cfg, "checkpoint": Path(boot.checkpoint.path), "coevolver": Path(boot.coevolver.path)}


def params_file(tmp_path: Path, *, raw_text: str | None = None, **sections) -> Path:
    """params.yaml (the project's, shrunk to TINY, outputs under tmp_path) with `sections` laid over it."""
    path = tmp_path / "params.yaml"
    if raw_text is not None:
        path.write_text(raw_text)
        return path
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, "run": {**TINY["run"], "out_dir": str(tmp_path / "run")}, **sections}.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    raw["problems"] = {**raw["problems"], "data_dir": str(tmp_path / "data"), **sections.get("problems", {})}
    path.write_text(yaml.safe_dump(raw))
    return path


def cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_clean_exit(result, *needles: str, code: int = 2) -> None:
    """Exit `code`, every needle in the output, no Python traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def assert_nothing_written(tmp_path: Path) -> None:
    """Neither the run directory nor the problem splits exist (nor any temporary of them)."""
    leftovers = [p.name for p in tmp_path.iterdir() if p.name in ("run", "data") or ".tmp" in p.name]
    assert not leftovers, leftovers


def table_section() -> str:
    """The page's table of bad inputs: from its title to the section on error types."""
    return MALFORMED_INPUTS_PAGE.read_text().split("# Malformed inputs", 1)[1].split("\n## Error types", 1)[0]


def readme_message(row_id: str, **names: Path) -> list[str]:
    """The table's quoted message (column "what you see") of row `row_id`, cut at its `...` elisions,
    with its placeholders (P, F, CKPT) replaced by the paths in `names`: the pieces the output must hold."""
    section = table_section()
    [line] = [line for line in section.splitlines() if line.startswith("| ") and line.split(" | ")[1:2] == [row_id]]
    excerpt = line.split(" | ")[3].strip("`")
    pieces = [piece.strip() for piece in excerpt.split("...")]
    for name, path in names.items():
        pieces = [f"{path}{piece[len(name) :]}" if piece.startswith(f"{name}:") else piece for piece in pieces]
    return pieces


def copy_checkpoint(run: dict, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run["checkpoint"], tmp_path / "ckpt"))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---- params ----


def params_unknown_key(tmp_path, run, monkeypatch):
    path = params_file(tmp_path, rollout={"problem_per_iter": 4})
    result = cli("prepare", "--params", path)
    assert_clean_exit(result, *readme_message("params-unknown-key", P=path))
    assert "did you mean rollout.problems_per_iter?" in result.output
    assert_nothing_written(tmp_path)


def params_wrong_type(tmp_path, run, monkeypatch):
    result = cli("prepare", "--params", params_file(tmp_path, run={"iterations": "many"}))
    assert_clean_exit(result, "run.iterations: Input should be a valid integer")
    assert_nothing_written(tmp_path)


def params_out_of_range(tmp_path, run, monkeypatch):
    result = cli("prepare", "--params", params_file(tmp_path, rollout={"group_size": 1}))
    assert_clean_exit(result, "rollout.group_size: Input should be greater than or equal to 2")
    assert_nothing_written(tmp_path)


def params_not_yaml(tmp_path, run, monkeypatch):
    path = params_file(tmp_path, raw_text="run: [out_dir\n")
    result = cli("prepare", "--params", path)
    assert_clean_exit(result, *readme_message("params-not-yaml", P=path))  # the parser's problem and where it is
    assert_nothing_written(tmp_path)


def set_bad_path(tmp_path, run, monkeypatch):
    result = cli("prepare", "--params", params_file(tmp_path), "--set", "optim.learning_rate=1e-3")
    assert_clean_exit(result, *readme_message("set-bad-path"))
    near = cli("prepare", "--params", params_file(tmp_path), "--set", "run.iteration=2")
    assert_clean_exit(near, "--set: run.iteration: unknown setting", "did you mean run.iterations?")
    assert_nothing_written(tmp_path)


def set_bad_value(tmp_path, run, monkeypatch):
    result = cli("prepare", "--params", params_file(tmp_path), "--set", "sampling.top_p=2")
    assert_clean_exit(result, "sampling.top_p: Input should be less than or equal to 1")
    assert_nothing_written(tmp_path)


def set_without_equals(tmp_path, run, monkeypatch):
    result = cli("prepare", "--params", params_file(tmp_path), "--set", "sampling.top_p")
    assert_clean_exit(result, "--set expects section.key=value, got 'sampling.top_p'")
    assert_nothing_written(tmp_path)


# ---- problem files (math: problems.source=file) ----


def _prepare_file(tmp_path: Path, name: str, content: bytes | None) -> tuple:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    result = cli("prepare", "--params", params_file(tmp_path, problems={"source": "file", "path": str(path)}))
    return path, result


def problems_missing_file(tmp_path, run, monkeypatch):
    path, result = _prepare_file(tmp_path, "nope.jsonl", None)
    assert_clean_exit(result, f"{path}: cannot read", "No such file")
    assert_nothing_written(tmp_path)


def problems_missing_column(tmp_path, run, monkeypatch):
    path, result = _prepare_file(tmp_path, "p.jsonl", b'{"id": "a", "prompt": "1+1="}\n{"id": "b", "prompt": "2+2="}\n')
    assert_clean_exit(
        result,
        f"{path}: field 'answer': missing column (absent from every row)",
        "list them in `rewards:` without `verifier`",  # a dataset without answers is judged by reward functions
    )
    assert_nothing_written(tmp_path)


def problems_empty_answer(tmp_path, run, monkeypatch):
    path, result = _prepare_file(
        tmp_path, "p.jsonl", PROBLEMS_OK.encode() + b'{"id": "d", "prompt": "4+4=", "answer": " "}\n'
    )
    assert_clean_exit(result, f"{path}: line 4, field 'answer': empty answer")
    assert_nothing_written(tmp_path)


def problems_duplicate_id(tmp_path, run, monkeypatch):
    path, result = _prepare_file(
        tmp_path, "p.jsonl", PROBLEMS_OK.encode() + b'{"id": "b", "prompt": "4+4=", "answer": 8}\n'
    )
    assert_clean_exit(result, f"{path}: line 4, field 'id': duplicate id 'b' (first at line 2)")
    assert_nothing_written(tmp_path)


def problems_wrong_type(tmp_path, run, monkeypatch):
    path, result = _prepare_file(
        tmp_path, "p.jsonl", PROBLEMS_OK.encode() + b'{"id": "d", "prompt": "4+4=", "answer": [8]}\n'
    )
    assert_clean_exit(result, f"{path}: line 4, field 'answer': wrong type list (expected int or str)")
    assert_nothing_written(tmp_path)


def problems_bad_jsonl_line(tmp_path, run, monkeypatch):
    path, result = _prepare_file(
        tmp_path, "p.jsonl", PROBLEMS_OK.encode() + b'{"id": "d", "prompt": "4+4=", "answer": 8\n'
    )
    assert_clean_exit(result, f"{path}: line 4: invalid JSON")
    assert_nothing_written(tmp_path)


def problems_unreadable_parquet(tmp_path, run, monkeypatch):
    path, result = _prepare_file(tmp_path, "p.parquet", b"PAR1 this is not a parquet file")
    assert_clean_exit(
        result, *readme_message("problems-unreadable-parquet", F=path)
    )  # arrow's reason, not just "cannot read"
    assert_nothing_written(tmp_path)


# ---- code problems (problems.source=code-file, HumanEval layout) ----


def code_missing_tests(tmp_path, run, monkeypatch):
    record = {"task_id": "t/0", "prompt": "def f(x):\n", "entry_point": "f", "canonical_solution": "    return x\n"}
    path, result = _prepare_code(tmp_path, record)
    assert_clean_exit(result, f"{path}: line 1, field 'test': missing")
    assert_nothing_written(tmp_path)


def code_missing_entry_point(tmp_path, run, monkeypatch):
    record = {"task_id": "t/0", "prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 1\n"}
    path, result = _prepare_code(tmp_path, record)
    assert_clean_exit(result, f"{path}: line 1, field 'entry_point': missing")
    assert_nothing_written(tmp_path)


def _prepare_code(tmp_path: Path, record: dict) -> tuple:
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path, cli("prepare", "--params", params_file(tmp_path, problems={"source": "code-file", "path": str(path)}))


# ---- checkpoints and tokenizers ----


def _eval(tmp_path: Path, checkpoint: Path | str, *extra: str):
    problems = tmp_path / "eval.jsonl"
    problems.write_text(PROBLEMS_OK)
    return cli(
        "eval",
        checkpoint,
        "--problems",
        problems,
        "--out",
        tmp_path / "result.json",
        "--params",
        params_file(tmp_path),
        *extra,
    )


def checkpoint_missing_dir(tmp_path, run, monkeypatch):
    result = _eval(tmp_path, tmp_path / "checkpoints" / "iter_0009")
    assert_clean_exit(result, "iter_0009: no such checkpoint directory")
    assert not (tmp_path / "result.json").exists()


def policy_checkpoint_missing(tmp_path, run, monkeypatch):
    result = cli(
        "bootstrap", "--params", params_file(tmp_path), "--set", f"policy.checkpoint={tmp_path / 'models' / 'mine'}"
    )
    assert_clean_exit(
        result, f"{tmp_path / 'models' / 'mine'}: not a Hugging Face checkpoint directory (no config.json)"
    )
    run_dir = tmp_path / "run"
    assert not (
        run_dir / "bootstrap"
    ).exists()  # no checkpoint 0; the splits and co-evolver iter_0000 are complete files
    assert not [p for p in run_dir.rglob("*") if ".tmp" in p.name]


def checkpoint_missing_weights(tmp_path, run, monkeypatch):
    ckpt = copy_checkpoint(run, tmp_path)
    (ckpt / "model.safetensors").unlink()
    result = _eval(tmp_path, ckpt)
    assert_clean_exit(result, f"{ckpt}: cannot load the weights (model.safetensors missing, truncated or corrupt)")
    assert not (tmp_path / "result.json").exists()


def checkpoint_truncated_weights(tmp_path, run, monkeypatch):
    from coevo.model.checkpoint import CheckpointError, load_policy

    ckpt = copy_checkpoint(run, tmp_path)
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    before = snapshot(ckpt)
    with pytest.raises(CheckpointError, match=rf"{ckpt}: cannot load the weights .*SafetensorError"):
        load_policy(ckpt, "cpu")
    assert snapshot(ckpt) == before  # loading never rewrites the checkpoint


def checkpoint_wrong_lineage_hash(tmp_path, run, monkeypatch):
    out_dir = run["cfg"].run.out_dir  # the whole run: the lineage names the co-evolver by a relative path
    copy = Path(shutil.copytree(out_dir, tmp_path / "run-copy", symlinks=True))
    ckpt = copy / run["checkpoint"].relative_to(out_dir)
    meta = json.loads((ckpt / "coevo.json").read_text())
    meta["files"]["config.json"] = "0" * 64  # the record no longer matches the file on disk
    (ckpt / "coevo.json").write_text(json.dumps(meta))
    result = cli("lineage", ckpt, "--verify")
    assert_clean_exit(
        result, "1 mismatch(es):", f"checkpoint file: {ckpt / 'config.json'}", f"expected {'0' * 64}", code=1
    )


def tokenizer_missing(tmp_path, run, monkeypatch):
    from coevo.model.checkpoint import CheckpointError, load_policy

    ckpt = copy_checkpoint(run, tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (ckpt / name).unlink()
    with pytest.raises(CheckpointError, match=rf"{ckpt}: cannot load the tokenizer \(tokenizer files found: none\)"):
        load_policy(ckpt, "cpu")


# ---- co-evolver directories ----


def coevolver_missing_manifest(tmp_path, run, monkeypatch):
    bank = Path(shutil.copytree(run["coevolver"], tmp_path / "bank"))
    (bank / "manifest.json").unlink()
    result = _eval(tmp_path, run["checkpoint"], "--coevolver", bank)
    assert_clean_exit(result, f"{bank / 'manifest.json'}: cannot read the co-evolver manifest")
    assert not (tmp_path / "result.json").exists()


def coevolver_tampered_entry(tmp_path, run, monkeypatch):
    from coevo.coevolvers import load_coevolver
    from coevo.coevolvers.base import CoevolverDirError

    bank = Path(shutil.copytree(run["coevolver"], tmp_path / "bank"))
    with (bank / "skills.jsonl").open("a") as fh:
        fh.write('{"id": "forged"}\n')
    with pytest.raises(
        CoevolverDirError, match=rf"{bank / 'skills.jsonl'}: content does not match the manifest's sha256"
    ):
        load_coevolver(bank, run["cfg"].coevolver_list[0], run["cfg"].seed)


# ---- CLI arguments ----


def cli_unknown_model_uri(tmp_path, run, monkeypatch):
    """Without a registry: exit 2, and the lookup creates no empty registry in the working directory."""
    monkeypatch.chdir(tmp_path)  # tracking.mlflow_uri is sqlite:///mlflow.db, relative to it
    result = _eval(tmp_path, "models:/nope@x")
    assert_clean_exit(
        result, "models:/nope@x: no model registry at sqlite:///mlflow.db", "does not exist; set tracking.mlflow_uri"
    )
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "result.json").exists()


def cli_unknown_model_in_registry(tmp_path, run, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.MlflowClient(uri).search_registered_models()  # a real, empty registry
    result = _eval(tmp_path, "models:/nope@best", "--set", f"tracking.mlflow_uri={uri}")
    assert_clean_exit(result, "models:/nope@best: not found in the model registry", "nope")
    assert not (tmp_path / "result.json").exists()


def cli_malformed_model_uri(tmp_path, run, monkeypatch):
    result = _eval(tmp_path, "models:/coevo-policy")
    assert_clean_exit(result, "models:/coevo-policy: expected models:/NAME@ALIAS or models:/NAME/VERSION")


def cli_unknown_option(tmp_path, run, monkeypatch):
    result = cli("train", "--params", params_file(tmp_path), "--iterations", "3")
    assert_clean_exit(result, "No such option: --iterations")
    assert_nothing_written(tmp_path)


# ---- endpoints ----


class _Unavailable(http.server.BaseHTTPRequestHandler):
    """Answers every request 503, counting them: a skill-writer endpoint that is down."""

    hits = 0

    def do_POST(self):  # noqa: N802 (http.server's name)
        type(self).hits += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "overloaded"}}')

    def log_message(self, *args):
        pass


def endpoint_unavailable(tmp_path, run, monkeypatch):
    from coevo.coevolvers.writers import ATTEMPTS, ChatEndpoint, EndpointError

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        endpoint = ChatEndpoint(base_url, "writer", "EMPTY", timeout_s=5, backoff_s=0.01)
        with pytest.raises(
            EndpointError, match=rf"request to {base_url} \(model 'writer'\) failed after {ATTEMPTS} attempt\(s\)"
        ):
            endpoint.ask("system", "write a skill")
    finally:
        server.shutdown()
        server.server_close()
    assert _Unavailable.hits == ATTEMPTS


def endpoint_unreachable(tmp_path, run, monkeypatch):
    import socket

    from coevo.coevolvers.writers import ATTEMPTS, ChatEndpoint, EndpointError

    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = ChatEndpoint(f"http://127.0.0.1:{port}/v1", "writer", "EMPTY", timeout_s=5, backoff_s=0.01)
    with pytest.raises(
        EndpointError,
        match=rf"127.0.0.1:{port}/v1 \(model 'writer'\) failed after {ATTEMPTS} attempt\(s\) .*Connection error",
    ):
        endpoint.ask("system", "write a skill")


# ---- reward plugins ----


def _prepare_with_plugin(tmp_path: Path, monkeypatch, module: str, source: str | None):
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.chdir(tmp_path)  # plugins are imported from the working directory first
    rewards = [{"function": "verifier", "weight": 1.0}, {"function": f"{module}:score", "weight": 1.0}]
    return cli("bootstrap", "--params", params_file(tmp_path, rewards=rewards))  # plugins are checked before the splits


def reward_unimportable(tmp_path, run, monkeypatch):
    result = _prepare_with_plugin(tmp_path, monkeypatch, "malformed_broken_rewards", "import not_a_module_anywhere\n")
    assert_clean_exit(
        result, "rewards[1].function", "cannot import module 'malformed_broken_rewards'", "not_a_module_anywhere"
    )
    assert_nothing_written(tmp_path)


def reward_wrong_length(tmp_path, run, monkeypatch):
    source = "def score(completions, **columns):\n    return [0.0]\n"
    result = _prepare_with_plugin(tmp_path, monkeypatch, "malformed_short_rewards", source)
    assert_clean_exit(result, "rewards[1].function", "returned 1 values for 2 completions")
    assert not (tmp_path / "run").exists()  # the probe runs on the written splits, before any run output


# ---- GGUF import ----


def gguf_garbage(tmp_path, run, monkeypatch):
    garbage = tmp_path / "model.gguf"
    garbage.write_bytes(b"<html>404 Not Found</html>")
    result = cli("import-model", garbage, "--out", tmp_path / "out")
    assert_clean_exit(result, f"{garbage}: not a GGUF file (starts with b'<htm'")
    assert not (tmp_path / "out").exists()


def gguf_unsupported_architecture(tmp_path, run, monkeypatch):
    from tests.model.test_import_model import write_tiny_gguf

    path = tmp_path / "rwkv.gguf"
    write_tiny_gguf(path, architecture="rwkv9")
    result = cli("import-model", path, "--out", tmp_path / "out")
    assert_clean_exit(result, f"{path}: transformers", "cannot convert this GGUF (general.architecture 'rwkv9')")
    assert not (tmp_path / "out").exists()


ROWS = [
    params_unknown_key,
    params_wrong_type,
    params_out_of_range,
    params_not_yaml,
    set_bad_path,
    set_bad_value,
    set_without_equals,
    problems_missing_file,
    problems_missing_column,
    problems_empty_answer,
    problems_duplicate_id,
    problems_wrong_type,
    problems_bad_jsonl_line,
    problems_unreadable_parquet,
    code_missing_tests,
    code_missing_entry_point,
    checkpoint_missing_dir,
    policy_checkpoint_missing,
    checkpoint_missing_weights,
    checkpoint_truncated_weights,
    checkpoint_wrong_lineage_hash,
    tokenizer_missing,
    coevolver_missing_manifest,
    coevolver_tampered_entry,
    cli_unknown_model_uri,
    cli_unknown_model_in_registry,
    cli_malformed_model_uri,
    cli_unknown_option,
    endpoint_unavailable,
    endpoint_unreachable,
    reward_unimportable,
    reward_wrong_length,
    gguf_garbage,
    gguf_unsupported_architecture,
]


ROW_IDS = [row.__name__.replace("_", "-") for row in ROWS]


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_malformed_input(row, tmp_path, run, monkeypatch):
    row(tmp_path, run, monkeypatch)


def test_readme_table_lists_every_row_in_order():
    section = table_section()
    listed = re.findall(r"^\| \d+ \| ([a-z0-9-]+) \|", section, flags=re.MULTILINE)
    assert listed == ROW_IDS
    assert len(ROW_IDS) >= 20
