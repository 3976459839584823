"""proftab measurements, each step in its own process, through the public API only:

    import proftab as pt
    tr = pt.load(path)            # step "load"
    tr.key_averages()             # step "key_averages" (also times tr.table())
    tr.device.self_time()         # step "device_time" (n/a for a trace without device rows)
    tr.to_parquet(dir)            # step "to_parquet"
    pt.scan(dir).key_averages()   # step "scan_key_averages" (needs a dir from "to_parquet"; may read
                                  #   the copy to_parquet stored with the dataset)
    pt.Trace(tables without the stored copy, files).key_averages()   # "scan_key_averages_computed"

A missing function/attribute (the API is still being written) is reported as
status "unavailable" with the error; any other exception as status "error".

usage: python proftab_step.py STEP TRACE [PARQUET_DIR]
"""
import os
import sys

from _child import error_info, perf, run

class Unavailable(Exception):
    pass


def _force(x):
    """Materialise lazy results so the timed region includes the work."""
    if hasattr(x, "collect") and callable(x.collect):
        x = x.collect()
    return x


def _rows(x):
    for attr in ("height", "num_rows"):
        v = getattr(x, attr, None)
        if isinstance(v, int):
            return v
    try:
        return len(x)
    except Exception:
        return None


def _api(obj, name):
    fn = getattr(obj, name, None)
    if fn is None:
        owner = obj.__name__ if isinstance(obj, type(os)) else f"{type(obj).__module__}.{type(obj).__name__}"
        raise Unavailable(f"{owner} has no attribute {name!r}")
    return fn


def _dir_bytes(d):
    total = 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def main():
    step, path = sys.argv[1], sys.argv[2]
    pq_dir = sys.argv[3] if len(sys.argv) > 3 else None
    t = {}
    out = {"timings": t}
    try:
        t0 = perf()
        import proftab as pt
        t["import_s"] = perf() - t0
        out["versions"] = {"proftab": getattr(pt, "__version__", None)}
        try:
            import polars, pyarrow
            out["versions"].update(polars=polars.__version__, pyarrow=pyarrow.__version__)
        except Exception:
            pass

        if step in ("scan_key_averages", "scan_key_averages_computed"):
            scan = _api(pt, "scan")
            t0 = perf()
            sc = scan(pq_dir)
            t["scan_s"] = perf() - t0
            if step == "scan_key_averages":
                # default call: may return the key_averages that to_parquet stored with the dataset
                ka_fn = _api(sc, "key_averages")
            else:
                # always computed from the stored events: the same lazy tables without the stored copy
                base = _api(pt, "Trace")
                fresh = base({k: v for k, v in sc.tables.items() if k != "key_averages"}, sc.files)
                ka_fn = _api(fresh, "key_averages")
            t0 = perf()
            ka = _force(ka_fn())
            t["key_averages_s"] = perf() - t0
            out["rows"] = _rows(ka)
            out["seconds"] = t["scan_s"] + t["key_averages_s"]
            return out

        load = _api(pt, "load")
        t0 = perf()
        tr = load(path)
        t["load_s"] = perf() - t0
        ev = getattr(tr, "events", None)
        if ev is not None and not callable(ev):
            out["table_events"] = _rows(ev)
        if step == "load":
            out["seconds"] = t["load_s"]
            return out

        if step == "key_averages":
            ka_fn = _api(tr, "key_averages")
            t0 = perf()
            ka = _force(ka_fn())
            t["key_averages_s"] = perf() - t0
            out["rows"] = _rows(ka)
            out["seconds"] = t["key_averages_s"]
            # tr.table(): timed after key_averages; its absence does not fail the step
            tbl = getattr(tr, "table", None)
            if tbl is None:
                out["table"] = "unavailable: no attribute 'table'"
            else:
                try:
                    t0 = perf()
                    r = _force(tbl())
                    t["table_s"] = perf() - t0
                    out["table_rows"] = _rows(r)
                except Exception as ex:  # noqa: BLE001
                    out["table"] = "error: " + error_info(ex)["error_type"] + ": " + str(ex)[:300]
            return out

        if step == "device_time":
            name = "device.self_time"
            t0 = perf()
            from proftab import kinds

            r = _force(tr.device.self_time()) if kinds.has_device_rows(tr.categories) else None
            t["device_time_s"] = perf() - t0
            out["method"] = name
            if r is None:
                out.update(status="n/a", error="no device activity in this trace")
            out["rows"] = _rows(r)
            out["seconds"] = t["device_time_s"]
            return out

        if step == "to_parquet":
            to_pq = _api(tr, "to_parquet")
            t0 = perf()
            to_pq(pq_dir)
            t["to_parquet_s"] = perf() - t0
            out["parquet_bytes"] = _dir_bytes(pq_dir)
            out["seconds"] = t["to_parquet_s"]
            return out

        raise SystemExit(f"unknown step {step}")
    except (Unavailable, ImportError, AttributeError, NotImplementedError) as ex:
        info = error_info(ex)
        out.update(status="unavailable", **info)
        return out


run(main)
