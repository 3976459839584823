"""Readers and writers: trace files -> tables, and back to Parquet."""
