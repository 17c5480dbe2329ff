"""Exceptions of symmflow: every C++ ``symmflow::Error`` reaches Python as one of these.

``str(e)`` is the C++ ``what()``; ``e.code`` is the C++ error code's name ("InvalidUsage",
"Timeout", "PeerFailure", ...). This module imports nothing of symmflow (the native module
imports it to raise them).
"""
from __future__ import annotations


class Error(RuntimeError):
    """A symmflow error; ``code`` names the C++ ErrorCode."""

    def __init__(self, message: str, code: str = "Internal", diagnostics: list | None = None):
        super().__init__(message)
        self.code = code
        self.diagnostics: list[tuple[str, int, int, str]] = list(diagnostics or [])


class InvalidUsage(Error, ValueError):
    """Bad input: a wrong argument, shape, dtype, group, device or option."""


class Timeout(Error, TimeoutError):
    """A bounded wait (rendezvous, barrier, store key) ran out; the message names what waited."""


class PeerFailure(Error):
    """Another rank failed; the message names it and what it raised."""


class ProgramError(InvalidUsage):
    """A program that does not parse, verify or compile.

    ``diagnostics`` lists ``(file, line, column, message)``; ``str()`` is the formatted text
    (``file:line:col: error: ...``, the source line and a caret).
    """
