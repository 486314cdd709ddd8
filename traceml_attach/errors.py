"""Errors a user can act on (one line, an exit code) and the exit codes, documented in README.md:
raised anywhere below the CLI, caught once in it (cli/main.py)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2             # bad arguments or rules file
EXIT_NO_PROCESS = 3        # the PID does not exist (or exited before we attached)
EXIT_NOT_PYTHON = 4        # not a Python process, or a Python version py-spy cannot read
EXIT_PERMISSION = 5        # not permitted to read the process (ptrace)
EXIT_PYSPY = 6             # py-spy missing or failing
EXIT_BAD_FILE = 7          # a missing or corrupt summary/frames file
EXIT_TARGET_EXITED = 8     # the target exited before the requested duration; summary written
EXIT_NETWORK = 9           # multi-node: cannot listen or connect, or a bad token file
EXIT_REGRESSION = 9        # compare --fail-on-regression: the step rose beyond the noise and PCT
EXIT_NOT_WRITTEN = 10      # the run folder cannot be written (full disk, read-only): summary elsewhere or printed
EXIT_INTERNAL = 70         # a bug in traceml-attach

KIND_TO_EXIT = {
    "no_such_process": EXIT_NO_PROCESS,
    "not_python": EXIT_NOT_PYTHON,
    "unsupported_python": EXIT_NOT_PYTHON,
    "permission": EXIT_PERMISSION,
    "pyspy_missing": EXIT_PYSPY,
    "pyspy_failed": EXIT_PYSPY,
    "sampler_failed": EXIT_INTERNAL,   # a sampler thread crashed: a bug in traceml-attach
}


class CliError(Exception):
    """An error the user can act on: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
