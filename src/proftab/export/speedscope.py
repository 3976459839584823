"""speedscope files: one evented profile per thread (and per device stream).

An evented profile is a sequence of open/close frame events that must nest. A trace's
events nest on most threads; where an event outlives its parent (an overrun), the stack
at each instant is the innermost open event plus its still-open ancestors, so the
overrunning part shows under the grandparent. In both cases the time during which a frame
is on top of the stack is exactly the event's `self_ns`, so speedscope's self times add up
to proftab's. Times are integer nanoseconds relative to the earliest exported event (ranks
aligned on their wall clocks); zero-length events (self time 0) are left out.

Format: https://www.speedscope.app/file-format-schema.json (``evented`` profiles,
``unit: "nanoseconds"``).
"""

from __future__ import annotations

import heapq
import json
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from proftab import calltree, schema
from proftab.intervals.tree import row_positions

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["speedscope_document", "write_speedscope"]

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
_PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")


def _laminar_events(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Open/close events of properly nested intervals given in nesting order.

    Returns (at, is_open, row) sorted: at each time, closes (innermost first) before opens
    (outermost first).
    """
    n = len(s)
    pos = np.arange(n)
    at = np.concatenate([e, s])
    kind = np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)])
    tie = np.concatenate([-pos, pos])
    order = np.lexsort((tie, kind, at))
    rows = np.concatenate([pos, pos])[order]
    return at[order], kind[order].astype(bool), rows


def _sweep_events(s: np.ndarray, e: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Open/close events for a track with overruns (rows in nesting order, parent = row or -1).

    The stack at each instant is the innermost open event (latest in nesting order) and its
    ancestors that are still open. Python loop: used only on tracks that do not nest.
    """
    bounds = np.unique(np.concatenate([s, e]))
    at: list[int] = []
    kind: list[bool] = []
    rows: list[int] = []
    heap: list[int] = []
    i, n = 0, len(s)
    prev: list[int] = []
    for t in bounds.tolist():
        while i < n and s[i] <= t:
            heapq.heappush(heap, -i)
            i += 1
        while heap and e[-heap[0]] <= t:
            heapq.heappop(heap)
        stack: list[int] = []
        if heap:
            x = -heap[0]
            while x >= 0:
                if e[x] > t:
                    stack.append(x)
                x = int(parent[x])
            stack.reverse()
        k = 0
        while k < len(prev) and k < len(stack) and prev[k] == stack[k]:
            k += 1
        for r in reversed(prev[k:]):
            at.append(t)
            kind.append(False)
            rows.append(r)
        for r in stack[k:]:
            at.append(t)
            kind.append(True)
            rows.append(r)
        prev = stack
    return np.array(at, np.int64), np.array(kind, bool), np.array(rows, np.int64)


def speedscope_document(tr: Trace, *, device: bool = True, name: str | None = None) -> dict[str, Any]:
    """The speedscope document of `tr` as a dict (profiles' events as pre-encoded JSON text).

    Use `write_speedscope` to write a file; this returns ``{"doc": ..., "events": [...]}``
    where ``events[k]`` is the JSON text of profile k's event array.
    """
    from proftab.tracks import track_labels

    ev = calltree._select(tr.collect("nested"), device=device).with_columns(pl.col("name").fill_null(""))
    base = tr.files.select("rank", pl.col("base_time_ns").alias("_base"))
    ev = (ev.join(base, on="rank", how="left")
          .with_columns(_s=pl.col("start_ns") + pl.col("_base"),
                        _e=pl.max_horizontal("start_ns", "end_ns") + pl.col("_base"))
          .filter(pl.col("_e") > pl.col("_s")))
    t0 = int(ev.select(pl.col("_s").min()).item()) if ev.height else 0
    frames = ev.select(pl.col("name").unique(maintain_order=True))["name"]
    frame_id = pl.DataFrame({"name": frames, "_frame": np.arange(len(frames), dtype=np.int64)})
    ev = ev.join(frame_id, on="name", how="left").sort(
        [*schema.TRACK_KEYS, "_s", "_e", "event_id"], descending=[False] * 5 + [False, True, False], nulls_last=True)
    tracks = track_labels(tr.collect("events"), tr.collect("threads")).select(*schema.TRACK_KEYS, "label")
    labels = {tuple(r[:-1]): r[-1] for r in tracks.iter_rows()}
    shared = []
    for f in frames.to_list():
        m = _PY_FRAME.match(f)
        shared.append({"name": f, "file": m["file"], "line": int(m["line"])} if m else {"name": f})
    profiles: list[dict[str, Any]] = []
    events_json: list[str] = []
    for key, grp in ev.group_by(schema.TRACK_KEYS, maintain_order=True):
        s = grp["_s"].to_numpy() - t0
        e = grp["_e"].to_numpy() - t0
        if bool((grp["overrun_ns"].fill_null(0) > 0).any()):
            rank = grp["rank"].to_numpy()
            parent = row_positions(rank, grp["event_id"].to_numpy(), rank, grp["parent_id"].fill_null(-1).to_numpy())
            at, is_open, rows = _sweep_events(s, e, parent)
        else:
            at, is_open, rows = _laminar_events(s, e)
        fr = grp["_frame"].to_numpy()[rows]
        text = pl.DataFrame({"t": np.where(is_open, "O", "C"), "f": fr, "a": at}).select(
            pl.concat_str(pl.lit('{"type":"'), "t", pl.lit('","frame":'), pl.col("f").cast(pl.String),
                          pl.lit(',"at":'), pl.col("a").cast(pl.String), pl.lit("}")).str.join(","))
        events_json.append("[" + (text.item() if len(at) else "") + "]")
        label = labels.get(key) or " / ".join(str(k) for k in key)
        profiles.append({"type": "evented", "name": label, "unit": "nanoseconds",
                         "startValue": int(s.min()), "endValue": int(e.max())})
    files = [str(f) for f in tr.files["source_file"]]
    doc = {"$schema": SCHEMA_URL, "shared": {"frames": shared}, "profiles": profiles,
           "name": name or ", ".join(os.path.basename(f) for f in files), "activeProfileIndex": 0,
           "exporter": "proftab"}
    return {"doc": doc, "events": events_json}


def write_speedscope(tr: Trace, path: str | os.PathLike[str], *, device: bool = True, name: str | None = None) -> None:
    """Write `tr` as a speedscope file (open it at https://www.speedscope.app or with `speedscope`).

    Parameters
    ----------
    device
        Also export device streams (one profile per stream).
    name
        The document name (default: the trace file names).
    """
    built = speedscope_document(tr, device=device, name=name)
    doc = built["doc"]
    head = {k: v for k, v in doc.items() if k != "profiles"}
    parts = []
    for prof, events in zip(doc["profiles"], built["events"], strict=True):
        body = json.dumps(prof, ensure_ascii=False)[:-1]
        parts.append(f'{body}, "events": {events}}}')
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "profiles": [' + ", ".join(parts) + "]}\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
