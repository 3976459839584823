"""The C scanner and proftab.schema agree on every shared constant (issue 10)."""

from __future__ import annotations

import re
from pathlib import Path

from proftab import schema
from proftab.io import _kineto, kineto
from proftab.schema import ArgKind, Flag

SOURCE = Path(_kineto.__file__).with_name("_kineto.c").read_text()


def test_column_kind_codes_match() -> None:
    for kind in ArgKind:
        assert getattr(_kineto, kind.name) == kind.value, kind
    # and the C enum itself (the module constants could be added by hand)
    enum = re.search(r"enum \{ (K_I64 = 0[^}]*)\}", SOURCE)
    assert enum is not None
    codes = {k.strip().split(" = ")[0][2:]: int(k.strip().split(" = ")[1]) for k in enum.group(1).split(",")}
    assert codes == {k.name: k.value for k in ArgKind}


def test_flag_bits_match() -> None:
    exported = {name[5:]: getattr(_kineto, name) for name in dir(_kineto) if name.startswith("FLAG_")}
    assert exported, "the scanner exports its flag bits"
    for name, value in exported.items():
        assert Flag[name].value == value, name
    defined = dict(re.findall(r"#define FL_(\w+) (\d+)", SOURCE))
    assert {k: int(v) for k, v in defined.items()} == exported


def test_typed_args_fit_the_scanner() -> None:
    assert len(schema.TYPED_COLUMNS) <= _kineto.MAX_TYPED
    assert all(isinstance(kind, ArgKind) for _, _, kind in schema.TYPED_ARGS)
    assert all(col in schema.TYPED_COLUMNS for _, col, _ in schema.TYPED_ARGS)
    assert kineto.MAX_TOKEN_BYTES == _kineto.DEFAULT_MAX_TOKEN


def test_python_side_uses_no_literal_kind_codes() -> None:
    text = "".join(p.read_text() for p in Path(kineto.__file__).parent.glob("*.py"))
    assert not re.search(r"kind (?:in|==) \(?\d", text)
