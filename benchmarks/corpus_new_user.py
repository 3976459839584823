"""Input shapes and `check --strict` over the shared corpus, for whichever proftab is imported.

Per trace (the 46 public ones and the 6 torch213 ones): how many `group_by_input_shape` cells
span several lines, how many key_averages rows differ from the same trace re-saved compactly
with `json.dump` (pretty-printed ones only; note that the re-save goes through Python floats,
which drops the ns digits of ns-resolution timestamps), and the exit status of
`proftab check --strict`; then `check --salvage --strict` of a truncated trace. One JSON line
each. Run it with PYTHONPATH set to two checkouts to compare them.

usage: PYTHONPATH=src python benchmarks/corpus_new_user.py > out.jsonl
"""
import glob, gzip, json, os, subprocess, sys, tempfile, warnings
import polars as pl
import proftab as pt
warnings.simplefilter("ignore")
from pathlib import Path
S = os.environ.get("PROFTAB_SHARED_TRACES", str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
files = sorted(glob.glob(f"{S}/public/*/*.json*")) + sorted(glob.glob(f"{S}/torch213/*/trace.json.gz"))
tmp = tempfile.mkdtemp()
for f in files:
    row = {"trace": f.replace(S + "/", "")}
    raw = gzip.open(f).read() if f.endswith("gz") else open(f, "rb").read()
    pretty = b'\n  "' in raw[:20000] or b'\n    ' in raw[:20000]  # indentation near the start
    row["pretty"] = pretty
    try:
        tr = pt.load(f)
        ka = tr.key_averages(group_by_input_shape=True)
        row["shape_cells_multiline"] = int(ka["input_shapes"].str.contains("\n").sum())
        if pretty:
            compact = os.path.join(tmp, "c.json")
            with open(compact, "w") as fh:
                json.dump(json.loads(raw), fh, separators=(", ", ": "))
            kb = pt.load(compact).key_averages(group_by_input_shape=True)
            cols = ["name", "input_shapes", "calls", "self_cpu_ns", "cpu_total_ns"]
            a = ka.select(cols).sort(cols); b = kb.select(cols).sort(cols)
            row["rows_differing_from_compact"] = a.join(b, on=cols, how="anti", nulls_equal=True).height + \
                b.join(a, on=cols, how="anti", nulls_equal=True).height
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {str(exc)[:100]}"
    r = subprocess.run([sys.executable, "-m", "proftab", "check", f, "--strict"], capture_output=True, text=True)
    row["check_strict_rc"] = r.returncode
    print(json.dumps(row), flush=True)
# truncated trace loaded with --salvage
src = f"{S}/torch213/train_cnn/trace.json.gz"
data = gzip.open(src).read()
cut = os.path.join(tmp, "cut.json"); open(cut, "wb").write(data[: len(data) * 2 // 3])
r = subprocess.run([sys.executable, "-m", "proftab", "check", cut, "--salvage", "--strict"], capture_output=True, text=True)
print(json.dumps({"trace": "train_cnn truncated to 2/3, --salvage --strict", "check_strict_rc": r.returncode,
                  "stdout_tail": r.stdout.strip().splitlines()[-1:] }), flush=True)
