"""A progress bar on stderr while trace files are read.

The reader (C scanner fed by a zlib thread) has no callback, so progress is measured from
outside: a helper thread polls the read position of the input files' descriptors
(``/proc/self/fdinfo``, Linux). Elsewhere the bar shows the phase and elapsed time only.
Everything here is best effort and never raises into the command.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["PROGRESS_MIN_BYTES", "ReadProgress"]

#: inputs at least this large (bytes on disk) get a progress bar in `--progress auto`
PROGRESS_MIN_BYTES = 50 << 20
_PROC = "/proc/self"


def _positions(wanted: dict[str, int]) -> dict[str, int]:
    """Read offsets of the open descriptors whose real path is in `wanted`."""
    out: dict[str, int] = {}
    try:
        fds = os.listdir(f"{_PROC}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"{_PROC}/fd/{fd}")
            if target not in wanted:
                continue
            with open(f"{_PROC}/fdinfo/{fd}") as fh:
                for line in fh:
                    if line.startswith("pos:"):
                        out[target] = max(out.get(target, 0), int(line.split()[1]))
                        break
        except (OSError, ValueError):
            continue
    return out


class ReadProgress:
    """Context manager showing read progress of `paths` on stderr when `enabled`.

    Parameters
    ----------
    paths
        The input files.
    mode
        ``"auto"`` (on a terminal, for inputs of at least `PROGRESS_MIN_BYTES`),
        ``"always"`` or ``"never"``.
    """

    def __init__(self, paths: list[str], mode: str = "auto") -> None:
        self.sizes = {os.path.realpath(p): os.path.getsize(p) for p in paths if os.path.isfile(p)}
        self.total = sum(self.sizes.values())
        tty = sys.stderr.isatty()
        self.enabled = mode == "always" or (mode == "auto" and tty and self.total >= PROGRESS_MIN_BYTES)
        self.tty = tty
        self.label = "reading"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done: set[str] = set()
        self._seen: set[str] = set()
        self._t0 = time.monotonic()
        self._last_pct = -10
        self._last_label = "reading"

    def phase(self, label: str) -> None:
        """Switch the label (e.g. ``"nesting"``); the byte count is then complete."""
        self._done = set(self.sizes)
        self.label = label
        if self.enabled:
            self._draw(final=False)

    def _read_bytes(self) -> int:
        pos = _positions(self.sizes)
        for path in list(self._seen):
            if path not in pos:
                self._done.add(path)  # opened before, closed now: finished
        self._seen |= set(pos)
        return sum(self.sizes[p] if p in self._done else pos.get(p, 0) for p in self.sizes)

    def _draw(self, *, final: bool) -> None:
        done = self.total if self.label != "reading" else min(self._read_bytes(), self.total)
        pct = 100.0 * done / self.total if self.total else 100.0
        elapsed = time.monotonic() - self._t0
        text = (f"proftab: {self.label} {done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB "
                f"({pct:3.0f}%) {elapsed:5.1f}s")
        if self.tty:
            width = 30
            fill = int(width * pct / 100)
            bar = "#" * fill + "-" * (width - fill)
            sys.stderr.write(f"\r\033[K[{bar}] {text}")
            if final:
                sys.stderr.write("\r\033[K")
        elif final:
            sys.stderr.write(f"proftab: done in {elapsed:.1f}s\n")
        elif self.label != self._last_label or pct >= self._last_pct + 10:
            self._last_pct = int(pct // 10 * 10)
            self._last_label = self.label
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._draw(final=False)
            except Exception:  # noqa: BLE001 - progress must never break the command
                return

    def __enter__(self) -> ReadProgress:
        if self.enabled:
            self._draw(final=False)
            self._thread = threading.Thread(target=self._loop, name="proftab-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Any:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            try:
                self._draw(final=True)
            except Exception:  # noqa: BLE001
                pass
        return None
