from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TORCH213 = DATA / "torch213"
PUBLIC = DATA / "public"
BUNDLED = ROOT / "data"
SHARED = ROOT.parent / "shared"
SHARED_TORCH213 = SHARED / "traces" / "torch213"
SHARED_PUBLIC = SHARED / "traces" / "public"

needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared (the full trace corpus) is not present")

TORCH213_CASES = sorted(p.name for p in TORCH213.iterdir() if (p / "trace.json.gz").exists())


def shared_public_traces() -> list[Path]:
    """Every trace of ../shared/traces/public (empty when absent)."""
    return sorted(SHARED_PUBLIC.glob("*/*.json.gz")) if SHARED.exists() else []


def shared_torch213_cases() -> list[Path]:
    return sorted(p for p in SHARED_TORCH213.iterdir() if (p / "trace.json.gz").exists()) if SHARED.exists() else []
