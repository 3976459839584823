"""proftab's version, in a module of its own so that any layer can read it without importing the package."""

from __future__ import annotations

__version__ = "0.1.0"
