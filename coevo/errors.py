"""Errors for bad user input, as opposed to bugs.

`InputError` is a ValueError whose message already names what is wrong (the file, row and field, the
params key, the checkpoint or co-evolver directory); the CLI prints it without a traceback and exits
with code 2 (`coevo.cli_support.fail_cleanly`). The table of docs/operations/malformed-inputs.md lists each case.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input named in the message; `coevo` commands print it and exit 2."""
