"""The polars-free facts the C scanner is configured from: `Flag` bits, `ArgKind` codes, `TYPED_ARGS`.

`proftab.schema` re-exports them (with the column dtypes they imply); the loader's scan step
(`proftab.io.kineto.scan`) imports only this module, so a trace starts scanning before Polars and
numpy are imported (`proftab.io.kineto.reader` imports those beside the scan).
"""

from __future__ import annotations

import enum

__all__ = ["TYPED_ARGS", "ArgKind", "Flag"]


class Flag(enum.IntFlag):
    """Bits of the `flags` column."""

    NAME_REPAIRED = 1
    """a name/cat had invalid UTF-8 or an unescaped quote and was repaired"""
    TS_ROUNDED = 2
    """ts or dur had more than 3 fraction digits and was rounded to the nearest ns"""
    DUR_MISSING = 4
    """an X event without dur (dur_ns = 0)"""
    NEGATIVE_DUR = 8
    """dur < 0 in the file"""
    UNMATCHED_BEGIN = 16
    """a B/b event without its end; end_ns is the file's last timestamp"""
    ARGS_REPAIRED = 32
    """an args string had invalid UTF-8 or an unescaped quote and was repaired"""
    JSON_REPAIRED = 64
    """the event's JSON was invalid but readable (a number with leading zeros, a raw control character)"""


class ArgKind(enum.IntEnum):
    """How the scanner stores a typed `args` value (the C scanner exports the same codes)."""

    I64 = 0
    U64 = 1
    F64 = 2
    STR = 3
    JSON = 4
    """the value's JSON text verbatim"""
    BOOL = 5

    @property
    def is_text(self) -> bool:
        """Stored as a string column (offsets + data), not a fixed-width one."""
        return self in (ArgKind.STR, ArgKind.JSON)


# (json key, column, dtype). JSON-text columns hold the value in canonical JSON text (torch's
# `[[512], [141, 512], [], []]`, whatever the file's indentation: io.kineto.canonical_json_columns).
_I64, _U64, _F64, _STR, _JSON, _BOOL = ArgKind
TYPED_ARGS: list[tuple[str, str, int]] = [
    ("External id", "external_id", _I64),
    ("external id", "external_id", _I64),
    ("correlation", "correlation", _I64),
    ("Record function id", "record_function_id", _I64),
    ("Ev Idx", "ev_idx", _I64),
    ("Sequence number", "sequence_number", _I64),
    ("Fwd thread id", "fwd_thread_id", _I64),
    ("Input Dims", "input_dims", _JSON),
    ("Input dims", "input_dims", _JSON),
    ("Input type", "input_type", _JSON),
    ("Input Strides", "input_strides", _JSON),
    ("Concrete Inputs", "concrete_inputs", _JSON),
    ("Call stack", "call_stack", _STR),
    ("Module Hierarchy", "module_hierarchy", _STR),
    ("Python id", "python_id", _I64),
    ("Python parent id", "python_parent_id", _I64),
    ("Python module id", "python_module_id", _I64),
    ("stream", "stream", _I64),
    ("device", "device", _I64),
    ("Device Id", "device", _I64),
    ("context", "context", _I64),
    ("grid", "grid", _JSON),
    ("block", "block", _JSON),
    ("bytes", "bytes", _I64),
    ("Bytes", "bytes", _I64),
    ("cbid", "cbid", _I64),
    ("queued", "queued", _I64),
    ("registers per thread", "registers_per_thread", _I64),
    ("shared memory", "shared_memory", _I64),
    ("blocks per SM", "blocks_per_sm", _F64),
    ("warps per SM", "warps_per_sm", _F64),
    ("est. achieved occupancy %", "est_achieved_occupancy", _F64),
    ("memory bandwidth (GB/s)", "memory_bandwidth_gbs", _F64),
    ("Collective name", "collective_name", _STR),
    ("dtype", "dtype", _STR),
    ("In msg nelems", "in_msg_nelems", _I64),
    ("Out msg nelems", "out_msg_nelems", _I64),
    ("Group size", "group_size", _I64),
    ("Process Group Name", "process_group_name", _STR),
    ("Process Group Description", "process_group_desc", _STR),
    ("Process Group Ranks", "process_group_ranks", _STR),
    ("Comms Id", "comms_id", _U64),
    ("Seq", "seq", _I64),
    ("finished", "finished", _BOOL),
    ("Device Type", "device_type", _I64),
    ("Addr", "addr", _I64),
    ("Total Allocated", "total_allocated", _I64),
    ("Total Reserved", "total_reserved", _I64),
]
