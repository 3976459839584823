"""`python -m proftab` and the `proftab` console script; see `proftab.cli`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `proftab` command line with `argv` (default: ``sys.argv[1:]``); returns the exit status."""
    from proftab.cli import main as _main

    return _main(argv)


if __name__ == "__main__":
    sys.exit(main())
