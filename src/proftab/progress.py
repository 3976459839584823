"""The one progress bar on stderr: reading traces (`proftab summary ...`) and converting them.

One threshold and one look everywhere: in ``"auto"`` mode the bar is drawn only on a terminal
and only for inputs of at least `PROGRESS_MIN_BYTES`; ``"always"`` also draws when stderr is
not a terminal (one line per step or per 10 %); ``"never"`` is silent.

The reader (C scanner fed by a zlib thread) has no callback, so while files are read the bar
polls the read position of their descriptors (``/proc/self/fdinfo``, Linux); elsewhere it
shows the phase and elapsed time only. Everything here is best effort and never raises into
the command.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["PROGRESS_MIN_BYTES", "Progress", "progress_mode"]

#: inputs at least this large (bytes on disk) get a progress bar in ``"auto"`` mode
PROGRESS_MIN_BYTES = 16 << 20
_PROC = "/proc/self"
_WIDTH = 24


def progress_mode(mode: bool | str) -> str:
    """``"auto"``, ``"always"`` or ``"never"`` from a mode or a bool (True: auto)."""
    if isinstance(mode, bool):
        return "auto" if mode else "never"
    if mode not in ("auto", "always", "never"):
        msg = f"progress must be True, False, 'auto', 'always' or 'never', not {mode!r}"
        raise ProftabError(msg)
    return mode


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


class Progress:
    """A progress bar over `paths` (their bytes on disk) on stderr.

    Use it as a context manager while the files are read (`poll=True` follows the read
    offsets), call `phase` when the work moves on (``"nesting"``), and `file_done` when one
    of several files is finished (convert).

    Parameters
    ----------
    paths
        The input files.
    mode
        ``"auto"``, ``"always"``, ``"never"`` (or a bool, see `progress_mode`).
    title
        The word before the bar (``"proftab"``, ``"proftab convert"``).
    poll
        Follow the files' read offsets from a helper thread.
    """

    def __init__(self, paths: list[str], mode: bool | str = "auto", *, title: str = "proftab",
                 poll: bool = True) -> None:
        self.sizes = {os.path.realpath(p): os.path.getsize(p) for p in paths if os.path.isfile(p)}
        self.total = sum(self.sizes.values())
        self.n_files = len(paths)
        self.tty = sys.stderr.isatty()
        mode = progress_mode(mode)
        self.enabled = mode == "always" or (mode == "auto" and self.tty and self.total >= PROGRESS_MIN_BYTES)
        self.title = title
        self.label = "reading"
        self.files_done = 0
        self._done_bytes = 0
        self._poll = poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed: set[str] = set()
        self._seen: set[str] = set()
        self._t0 = time.monotonic()
        self._last = ("", -10)

    def phase(self, label: str) -> None:
        """Switch the label (e.g. ``"nesting"``); the files read so far count as read."""
        self.label = label
        if self.enabled:
            self._draw(final=False)

    def file_done(self, nbytes: int, note: str = "") -> None:
        """One of the files is finished (`nbytes` of input)."""
        self.files_done += 1
        self._done_bytes += nbytes
        self.phase(note or self.label)

    def show(self, note: str) -> None:
        """Draw the bar with `note` as the label (same as `phase`)."""
        self.phase(note)

    def _read_bytes(self) -> int:
        if not self._poll:
            return self._done_bytes
        pos = _positions(self.sizes)
        for path in list(self._seen):
            if path not in pos:
                self._closed.add(path)  # opened before, closed now: finished
        self._seen |= set(pos)
        polled = sum(self.sizes[p] if p in self._closed else pos.get(p, 0) for p in self.sizes)
        return max(polled, self._done_bytes)

    def _draw(self, *, final: bool) -> None:
        done = min(self._read_bytes() if self.label == "reading" or not self._poll else self.total, self.total)
        pct = 100.0 * done / self.total if self.total else 100.0
        elapsed = time.monotonic() - self._t0
        files = f" {self.files_done}/{self.n_files} files" if self.n_files > 1 else ""
        text = (f"{self.title}: {self.label}{files} {done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB "
                f"({pct:3.0f}%) {elapsed:5.1f}s")
        if self.tty:
            fill = int(_WIDTH * pct / 100)
            sys.stderr.write(f"\r\033[K[{'#' * fill}{'-' * (_WIDTH - fill)}] {text}")
            if final:
                sys.stderr.write("\r\033[K")
        elif final:
            sys.stderr.write(f"{self.title}: done in {elapsed:.1f}s\n")
        elif (self.label, int(pct // 10)) != self._last:
            self._last = (self.label, int(pct // 10))
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._draw(final=False)
            except Exception:  # noqa: BLE001 - progress must never break the command
                return

    def close(self) -> None:
        """Stop drawing and clear the line."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.enabled:
            try:
                self._draw(final=True)
            except Exception:  # noqa: BLE001
                pass
            self.enabled = False

    def __enter__(self) -> Progress:
        if self.enabled:
            self._draw(final=False)
            if self._poll:
                self._thread = threading.Thread(target=self._loop, name="proftab-progress", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Any:
        self.close()
        return None
