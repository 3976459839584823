"""The Kineto reader: trace files read in parallel, each scanned first, into one Trace.

Importing this module imports neither Polars nor numpy: `read_files` starts the C scanner
first and imports the table builders on a second thread meanwhile (`_TableModules`), so in a
fresh process `import proftab; pt.load(path)` spends the import time beside the scan.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import TYPE_CHECKING

from proftab.exceptions import TraceError
from proftab.io.files import expand_sources
from proftab.io.kineto.scan import scan_path
from proftab.io.tables import trace_from_files

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.io.tables import FileTables, ReadOptions
    from proftab.trace import Trace

__all__ = ["read_files", "read_traces"]

#: what building a Trace imports (Polars and numpy through them); `numpy.ma` is imported by
#: Polars when it first builds a Series from a numpy array
_TABLE_MODULES = ("proftab.io.kineto.tables", "proftab.trace", "proftab.meta", "numpy.ma")


class _TableModules:
    """Imports `modules` on a helper thread while the C scanner reads (the scanner releases the
    GIL; on a second core the imports cost no wall time).

    `wait()` returns once the thread has finished, so no import is left running when `load`
    returns. A failed import is left to the caller's own import, which raises it as usual.
    Nothing is started when the modules are already imported.
    """

    def __init__(self, modules: Sequence[str]) -> None:
        self._thread: threading.Thread | None = None
        if all(m in sys.modules for m in modules):
            return

        def work() -> None:
            for module in modules:
                try:
                    importlib.import_module(module)
                except BaseException:  # noqa: BLE001 - the caller's own import raises it
                    return

        self._thread = threading.Thread(target=work, name="proftab-imports", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Block until the imports have finished (at once when none were started)."""
        if self._thread is not None:
            self._thread.join()


def read_files(paths: list[str], *, salvage: bool = False, ranks: Sequence[int] | None = None,
               max_workers: int | None = None, first_position: int = 0,
               prefetch: Sequence[str] = ()) -> list[FileTables]:
    """Read several trace files concurrently (the scanner releases the GIL).

    Each file is scanned first (`proftab.io.kineto.scan`); the table builders (and the modules
    of `prefetch`) are imported beside the scans and used once they are there. A file's rank
    falls back to its position, counted from `first_position`.
    """
    if ranks is not None and len(ranks) != len(paths):
        msg = f"ranks has {len(ranks)} entries for {len(paths)} files"
        raise TraceError(msg)
    modules = _TableModules((*_TABLE_MODULES, *prefetch))

    def one(i: int) -> FileTables:
        try:
            res = scan_path(paths[i], salvage=salvage)
        finally:  # a file that fails to scan too: no import is left running when load returns or raises
            modules.wait()
        from proftab.io.kineto.tables import tables_from_scan

        return tables_from_scan(res, paths[i], salvage=salvage, position=first_position + i,
                                rank=None if ranks is None else ranks[i])

    if len(paths) == 1:
        return [one(0)]
    from concurrent.futures import ThreadPoolExecutor  # (imports logging: not for the one-file case)

    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        tables = list(pool.map(one, range(len(paths))))
    seen: dict[int, str] = {}
    for t in tables:
        if t.rank in seen:
            msg = (f"two files claim rank {t.rank} ({seen[t.rank]} and {t.path}, from "
                   f"{t.meta['rank_source']})")
            raise TraceError(msg, hint="load them separately, or give each file its rank: "
                                       "pt.load(..., ranks=[0, 1, ...]) (CLI: --ranks 0,1,...)")
        seen[t.rank] = t.path
    return tables


def read_traces(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], options: ReadOptions) -> Trace:
    """The reader of Kineto trace files (`proftab.io.readers`): every file `source` names, one rank each."""
    paths = expand_sources(source)
    return trace_from_files(read_files(paths, salvage=options.salvage, ranks=options.ranks,
                                       first_position=options.first_position, prefetch=options.prefetch))
