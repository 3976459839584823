"""Errors and warnings raised by proftab.

Every error descends from `ProftabError`; errors about input files are `TraceError`, which is
also a `ValueError` so that callers catching the stdlib type keep working.
"""

from __future__ import annotations

__all__ = ["MissingDependencyError", "ProftabError", "ProftabWarning", "SkippedFileWarning", "TraceError",
           "UsageError"]


class ProftabError(Exception):
    """Root of every proftab error."""


class TraceError(ProftabError, ValueError):
    """A trace file is missing, malformed or damaged.

    The message names the file, the byte offset (when known) and a short excerpt.
    `recoverable_events` is the number of complete events that ``salvage=True`` would keep
    (``None`` when not applicable).
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 excerpt: str | None = None, recoverable_events: int | None = None,
                 hint: str | None = None) -> None:
        parts = [f"{path}: {message}" if path else message]
        if offset is not None:
            parts.append(f"at byte {offset}")
        text = " ".join(parts)
        if excerpt:
            text += f" near {excerpt!r}"
        if hint:
            text += f"\nHint: {hint}"
        super().__init__(text)
        self.path = path
        self.offset = offset
        self.excerpt = excerpt
        self.recoverable_events = recoverable_events


class UsageError(ProftabError, ValueError):
    """An argument or option has a value proftab cannot use (a bad sort key, an unknown step...)."""


class MissingDependencyError(ProftabError, ImportError):
    """An optional dependency a feature needs is not installed; the message names the extra."""


class ProftabWarning(UserWarning):
    """A recoverable oddity in a trace (repaired names, salvaged events, overruns...)."""


class SkippedFileWarning(ProftabWarning):
    """`convert(..., on_error="skip")` left a source file out of the dataset (`path`: that file)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path
