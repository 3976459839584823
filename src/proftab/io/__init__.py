"""Reading and writing traces, grouped by format, behind one reader seam (`readers`).

- `kineto/`: Kineto / Chrome trace JSON (the C scanner `_kineto`, gzip, the table builders, the reader);
- `dataset/`: proftab Parquet datasets (layout, write, read/scan, convert, query, object stores, Dask);
- `torch_live`: a live `torch.profiler.profile`;
- `inductor`, `inductor_graph`: torch.compile's provenance artifacts (the `compile_provenance` table);
- `memory_snapshot`: torch's CUDA memory snapshot pickle, read without executing code;
- `tables`: `FileTables`, the frames every file reader returns, and `trace_from_files`;
- `files`: the trace files a user's source names.

Nothing here imports an analysis (`tests/test_layering.py`): what the analyses add to a read or
written trace is passed in from above, by `proftab.pipeline`.
"""
