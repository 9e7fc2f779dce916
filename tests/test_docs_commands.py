"""Every command the docs show parses, and every path of the project it names exists.

The commands are the lines of the docs' shell code blocks (```bash, ```sh, ```console fences, and
unlabelled fences and indented blocks that start with a command) in docs/ and README.md, with `\\` continuations
joined, `$ ` prompts, comments, leading `VAR=value` assignments and `nice` / `timeout` dropped. Then:

- a `coevo ...` line is parsed by the real command line (typer's click command, every subcommand and
  option, types included) without running it: a renamed option or a misspelt command fails here;
- `python -m MODULE` must name an importable module, `python SCRIPT` an existing file, `make TARGET`
  a Makefile target;
- every argument that names a file of the project (under examples/, bench/, docs/, tests/, schemas/,
  coevo/, flows/, tasks/, or params.yaml, dvc.yaml) must exist, except the value of an output option
  (`--out`) and a path into a bench/results/ directory that is not committed (what an earlier command
  of the same block writes).

Running the commands themselves is the benchmarks' and the examples' business (minutes to hours, some
on the real model); this catches the wrong path or flag in seconds.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.main import get_command

from coevo.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
SHELL_FENCES = ("bash", "sh", "console")
COMMAND_STARTS = ("coevo ", ".venv/bin/", "python ", "python3 ", "make ", "PYTHONPATH=", "nice ", "dvc ")
PROJECT_PATH = re.compile(
    r"^(?:(?:examples|bench|docs|tests|schemas|coevo|flows|tasks)/[\w./-]*\w|params\.yaml|dvc\.yaml)$"
)
OUTPUT_OPTIONS = ("--out", "-o", "--output")
PYTHONS = (".venv/bin/python", "python", "python3")


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, body) of each shell code block of a Markdown page."""
    found = [
        (text[: m.start()].count("\n") + 2, m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
        if m.group(1) in SHELL_FENCES or (not m.group(1) and m.group(2).lstrip().startswith(COMMAND_STARTS))
    ]
    outside = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    for m in re.finditer(r"(?:^|\n)\n((?:    [^\n]*(?:\n|$))+)", outside):
        body = "\n".join(line[4:] for line in m.group(1).splitlines())
        if body.lstrip().startswith(COMMAND_STARTS):
            found.append((outside[: m.start(1)].count("\n") + 1, body))
    return found


def command_words(body: str) -> list[tuple[str, list[str]]]:
    """(line, words) of each command of a block (each of a `&&` chain), with prompts, comments, env
    assignments and nice/timeout dropped, and a usage line's optional `[--flag value]` as if given."""
    commands = []
    for line in re.sub(r"\\\n\s*", " ", body).splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        synopsis = re.sub(r"\[(-[^\[\]]*)\]", r"\1", line)  # `[--json]` in a usage line: checked as given
        for words in _split_chain(shlex.split(synopsis, comments=True)):
            while words and (re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]) or words[0] in ("nice", "timeout")):
                skip = {"nice": 1, "timeout": 2}.get(words[0], 1)
                words = words[skip:]
                if words and words[0] == "-n":  # nice -n 19
                    words = words[2:]
            if words:
                commands.append((line, words))
    return commands


def _split_chain(words: list[str]) -> list[list[str]]:
    """The commands of a `a && b ; c` line."""
    chain: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";", "|"):
            chain.append([])
        else:
            chain[-1].append(word)
    return chain


def doc_commands() -> list[tuple[str, str, list[str]]]:
    """(page:line, line, words) of every command the docs show."""
    return [
        (f"{page.relative_to(ROOT)}:{start}", line, words)
        for page in PAGES
        for start, body in shell_blocks(page.read_text())
        for line, words in command_words(body)
    ]


def parse_coevo(args: list[str]) -> None:
    """Parse a `coevo` command line as the real CLI would, down to its subcommand, without running it
    (a group's first word names its subcommand: the groups here take no options of their own)."""
    command, name, rest = get_command(app), "coevo", list(args)
    while isinstance(command, TyperGroup) and rest and not rest[0].startswith("-"):
        name, *rest = rest
        found = command.get_command(command.make_context(name, [], resilient_parsing=True), name)
        if found is None:
            raise ValueError(f"No such command '{name}'.")
        command = found
    command.make_context(name, rest)


def problems_of(words: list[str]) -> list[str]:
    """What is wrong with one command: an unparsable coevo line, a missing module, script, target or path."""
    found, program = [], words[0]
    if program in ("coevo", ".venv/bin/coevo"):
        try:
            parse_coevo(words[1:])
        except typer.Exit:  # --help
            pass
        except typer.TyperException as exc:  # click's usage errors (typer vendors click)
            found.append(getattr(exc, "format_message", exc.__str__)())
        except ValueError as exc:
            found.append(str(exc))
    if program in PYTHONS and len(words) > 2 and words[1] == "-m":
        if importlib.util.find_spec(words[2]) is None:
            found.append(f"no module {words[2]}")
    elif program in PYTHONS and len(words) > 1 and not (ROOT / words[1]).is_file():
        found.append(f"no script {words[1]}")
    if program == "make" and len(words) > 1 and words[1] not in make_targets():
        found.append(f"no make target {words[1]}")
    for before, word in zip(words, words[1:]):
        if before in OUTPUT_OPTIONS or not PROJECT_PATH.match(word) or (ROOT / word).exists():
            continue
        parts = Path(word).parts
        if parts[:2] == ("bench", "results") and not (ROOT / Path(*parts[:3])).exists():
            continue  # written by an earlier command of the block (results directories not committed)
        found.append(f"no {word}")
    return found


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def test_the_docs_show_commands():
    """The extraction finds the docs' commands (a parser that finds none would pass everything)."""
    commands = doc_commands()
    coevo = [words for _, _, words in commands if words[0] in ("coevo", ".venv/bin/coevo")]
    assert len(commands) >= 100 and len(coevo) >= 40, (len(commands), len(coevo))


@pytest.mark.parametrize("where, line, words", doc_commands(), ids=lambda value: None)
def test_every_documented_command_parses_and_names_existing_paths(where, line, words):
    assert not (found := problems_of(words)), f"{where}: {line}\n  " + "\n  ".join(found)


def test_a_wrong_flag_a_missing_script_and_a_missing_path_are_caught():
    assert problems_of(["coevo", "train", "--iteration", "3"])  # a misspelt option
    assert problems_of(["coevo", "trian"])  # a misspelt command
    assert problems_of([".venv/bin/python", "bench/no_such_bench.py"])
    assert problems_of(["coevo", "train", "--params", "examples/no_such.yaml"])
    assert not problems_of(["coevo", "train", "--params", "examples/smollm2.yaml", "--set", "run.iterations=2"])
