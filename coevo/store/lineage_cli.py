"""`coevo lineage CHECKPOINT`: what a checkpoint was made from, back to the bootstrap, and a hash check.

The main CLI mounts the command with `app.command("lineage")(lineage)`. CHECKPOINT is a directory or
an MLflow model URI (models:/NAME@ALIAS, models:/NAME/VERSION). Exit codes: 0 shown (and, with
--verify, every hash matches), 1 --verify found mismatches, 2 the checkpoint or its record is unreadable.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

console = Console(soft_wrap=True)
errors = Console(soft_wrap=True, stderr=True)
PREFIX = 12  # hex digits of a hash shown in the tree


def lineage(
    checkpoint: Annotated[
        str, typer.Argument(help="Checkpoint directory, or models:/NAME@ALIAS or models:/NAME/VERSION.")
    ],
    verify: Annotated[
        bool, typer.Option("--verify", help="Recompute every hash along the chain; exit 1 on any mismatch.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object {chain, mismatches} instead of a tree.")
    ] = False,
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow tracking URI for models:/ refs.")
    ] = None,
) -> None:
    """Show a checkpoint's lineage back to the bootstrap and its data; --verify rechecks every hash."""
    from coevo.api import lineage as lineage_of  # transformers: ~7 s, only for this command

    try:
        out = lineage_of(
            checkpoint, verify=verify, tracking_uri=tracking_uri
        )  # coevo.lineage() returns the same object
    except (ValueError, FileNotFoundError) as exc:
        errors.print(Text.assemble(("error: ", "red"), str(exc)))
        if as_json:
            typer.echo(json.dumps({"error": str(exc), "setting": None}, indent=2, sort_keys=True))
        raise typer.Exit(2) from exc
    chain, mismatches = out["chain"], out.get("mismatches")
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
    else:
        console.print(chain_tree(checkpoint, chain))
        if mismatches is not None:
            print_mismatches(mismatches, sum(not entry["missing"] for entry in chain))
    if mismatches:
        raise typer.Exit(1)


def chain_tree(ref: str, chain: list[dict]) -> Tree:
    """One branch per checkpoint, newest first, each with its inputs' hashes."""
    tree = Tree(Text(f"lineage of {ref}", style="bold"))
    for entry in chain:
        weights = f"weights {_short(entry['weights_sha256'])}"
        if entry["missing"]:
            tree.add(Text(f"MISSING {entry['checkpoint']}  (recorded {weights})", style="red"))
        elif entry["lineage"] is None:
            tree.add(Text(f"{entry['checkpoint']}  {weights}  (no lineage record)", style="yellow"))
        else:
            pruned = "  (weights pruned by retention)" if entry.get("pruned") else ""
            node = tree.add(
                Text(f"iter {entry['lineage']['iteration']}  {weights}{pruned}  {entry['checkpoint']}", style="bold")
            )
            for label, value in _details(entry["lineage"], entry.get("coevolver_pruned", False)):
                node.add(Text(f"{label}: {value}"))
    return tree


def _details(record: dict, coevolver_pruned: bool = False) -> list[tuple[str, str]]:
    coevolver, code = record.get("coevolver"), record["code"]
    pruned = "  (files pruned by retention)" if coevolver_pruned else ""
    rows = [
        (
            "co-evolver",
            f"{coevolver['kind']} {_short(coevolver['content_hash'])}{pruned}  {coevolver['path']}"
            if coevolver
            else "none",
        )
    ]
    for i, member in enumerate((coevolver or {}).get("members", [])):  # a list of co-evolvers
        rows.append((f"  member {i}", f"{member['kind']} {_short(member['content_hash'])}"))
    if record.get("harness"):  # the harness version trained under and the values it set
        harness = record["harness"]
        values = "  ".join(f"{knob}={value!r:.48}" for knob, value in sorted(harness["in_force"].items()))
        rows.append(("harness in force", f"{_short(harness['content_hash'])}  {harness['path']}  {values}"))
    for key in ("rollouts", "rewards"):
        rows.append((key, f"{_short(record[key]['sha256'])}  {record[key]['path']}" if record.get(key) else "none"))
    for name, entry in sorted(record["data"].items()):
        if name != "dvc_md5":
            rows.append((f"data {name}", f"{_short(entry['sha256'])}  {entry['path']}"))
    if record["data"].get("dvc_md5"):
        rows.append(("data dvc md5", record["data"]["dvc_md5"]))
    rows.append(("params", _short(record["params"]["sha256"])))
    if record.get("source"):
        rows.append(("source", _source_line(record["source"])))
    if record.get("base"):  # a LoRA checkpoint: adapters on this base
        rows.append(("LoRA base", f"{_short(record['base']['weights_sha256'])}  {record['base']['path']}"))
    if record.get("unchanged_from"):
        rows.append(("weights unchanged from", record["unchanged_from"]))
    dirty = " (dirty)" if code.get("git_dirty") else ""
    rows.append(("code", f"git {_short(code.get('git_commit'))}{dirty}  coevo {code.get('coevo_version')}"))
    return rows


def print_mismatches(mismatches: list[dict], checked: int) -> None:
    """`mismatches`: Mismatch.to_dict() objects, as coevo.lineage(verify=True) returns them."""
    if not mismatches:
        console.print(Text(f"verified: {checked} checkpoint(s), every hash matches", style="green"))
        return
    console.print(Text(f"{len(mismatches)} mismatch(es):", style="red"))
    for m in mismatches:
        console.print(
            Text.assemble((m["what"], "bold"), f": {m['path']}\n  expected {m['expected']}\n  actual   {m['actual']}")
        )


def _source_line(source: dict) -> str:
    imported = source.get("import")
    if not imported:
        return source["path"]
    package = imported.get("package")
    origin = f"{package['name']} {package['version']}" if package else imported["source"]["path"]
    return f"{source['path']}  imported from GGUF {_short(imported['source']['sha256'])} ({origin})"


def _short(digest: str | None) -> str:
    return digest[:PREFIX] if digest else "?"
