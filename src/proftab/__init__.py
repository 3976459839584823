"""proftab: exact, columnar tables from PyTorch profiler traces."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
