"""Optional dependencies, imported in one place with one error naming the extra to install."""

from __future__ import annotations

import importlib
from typing import Any

from proftab.exceptions import MissingDependencyError

__all__ = ["import_optional"]


def import_optional(module: str, *, extra: str, what: str) -> Any:
    """Import `module`, or raise `MissingDependencyError` saying ``pip install 'proftab[extra]'``.

    Parameters
    ----------
    module
        The module to import (``"altair"``).
    extra
        The proftab extra that installs it (``"plot"``).
    what
        What needs it, for the message (``"plotting"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        msg = f"{what} needs the {module.split('.')[0]} package: pip install 'proftab[{extra}]'"
        raise MissingDependencyError(msg) from exc
