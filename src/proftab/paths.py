"""`data_path`: the repository's sample traces from any working directory (notebooks/, the root)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    import os

__all__ = ["data_path"]


def _is_checkout(root: Path) -> bool:
    """A proftab source checkout: its pyproject.toml names the project and `data/` is beside it."""
    pyproject = root / "pyproject.toml"
    try:
        return (root / "data").is_dir() and 'name = "proftab"' in pyproject.read_text(encoding="utf-8")
    except OSError:
        return False


def data_path(name: str | os.PathLike[str] = "data") -> Path:
    """The path of `name`, given relative to the proftab repository root, from any directory.

    ``pt.data_path("data/train_cnn.pt.trace.json.gz")`` works from the repository root, from
    ``notebooks/`` (Jupyter's and VS Code's working directory) and from any other directory
    below the root: `name` is tried relative to the working directory, then relative to the
    nearest enclosing proftab checkout, then relative to the checkout proftab was imported
    from (an editable install).

    Raises
    ------
    ProftabError
        No such path in any of those places (the message lists them).
    """
    rel = Path(name)
    if rel.is_absolute() or rel.exists():
        return rel
    here = Path.cwd().resolve()
    roots = [p for p in (here, *here.parents) if _is_checkout(p)]
    package_root = Path(__file__).resolve().parents[2]
    if _is_checkout(package_root):
        roots.append(package_root)
    for root in roots:
        if (root / rel).exists():
            return root / rel
    tried = [str(Path.cwd() / rel), *(str(r / rel) for r in roots)]
    msg = f"{str(rel)!r} not found; looked in: {', '.join(tried)}"
    raise ProftabError(msg)
