"""Fuzz harness for the trace loader (see docs/robustness.md)."""
