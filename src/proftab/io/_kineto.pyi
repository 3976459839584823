# The C scanner (_kineto.c): `Parser(spec, salvage=, max_token=)` with `feed(bytes) -> bool` and
# `finish() -> dict`, plus the exported kind codes, flag bits and limits (tests/test_scanner_constants.py).
from typing import Any

def __getattr__(name: str) -> Any: ...
