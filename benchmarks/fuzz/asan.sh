#!/usr/bin/env bash
# Fuzz the trace loader against an AddressSanitizer + UndefinedBehaviorSanitizer build of the
# C scanner for N minutes (docs/robustness.md).
#
#   benchmarks/fuzz/asan.sh [MINUTES=10] [OUT=/tmp/proftab-fuzz-asan.json]
#
# PROFTAB_SRC=DIR tests another source tree (e.g. an older checkout's src/) with this harness;
# SKIP_ATHERIS=1 skips step 3.
#
# 1. copies src/ to a scratch directory and builds proftab/io/_kineto there with
#    -fsanitize=address,undefined (halt on the first report);
# 2. runs benchmarks/fuzz/run_fuzz.py (the structure-aware harness in child processes) with
#    libasan preloaded into the interpreter;
# 3. if atheris pip-installs into a scratch venv, runs the coverage-guided target
#    tests/fuzz/atheris_target.py for a further MINUTES/2 on the regular scanner build in src/
#    (coverage over the Python layer; skipped otherwise).
set -euo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${1:-10}
OUT=${2:-/tmp/proftab-fuzz-asan.json}
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/proftab-asan.XXXXXX)
SRC=${PROFTAB_SRC:-src}
cp -r "$SRC" "$WORK/src"
rm -f "$WORK"/src/proftab/io/_kineto*.so
INC=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
CC=${CC:-gcc}
$CC -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -std=c11 -Wall -Wno-unused-function -I"$INC" "$WORK/src/proftab/io/_kineto.c" -o "$WORK/src/proftab/io/_kineto$EXT"
LIBASAN=$($CC -print-file-name=libasan.so)
LIBUBSAN=$($CC -print-file-name=libubsan.so)
export LD_PRELOAD="$LIBASAN:$LIBUBSAN"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export PYTHONPATH="$WORK/src"
$PY -c 'import proftab.io._kineto as k, sys; print("scanner:", k.__file__, file=sys.stderr)'
$PY benchmarks/fuzz/run_fuzz.py --minutes "$MINUTES" --out "$OUT" --logs "$WORK/logs"

VENV=${ATHERIS_VENV:-/tmp/proftab-atheris-venv}
if [ -n "${SKIP_ATHERIS:-}" ]; then
    echo "atheris: skipped (SKIP_ATHERIS)" >&2
elif [ -x "$VENV/bin/python" ] || (python3 -m venv --system-site-packages "$VENV" && \
        "$VENV/bin/pip" install -q atheris >/dev/null 2>&1); then
    if "$VENV/bin/python" -c 'import atheris' 2>/dev/null; then
        SECS=$($PY -c "print(max(1, int(float('$MINUTES') * 30)))")  # libFuzzer: 0 would mean forever
        mkdir -p "$WORK/corpus" "$WORK/logs"
        $PY -c 'import sys; sys.path.insert(0, "."); from tests.fuzz.harness import load_seeds
for i, s in enumerate(load_seeds(40)): open(f"'"$WORK"'/corpus/seed{i}.json", "wb").write(s.text)'

        echo "atheris: ${SECS}s coverage-guided run" >&2
        # atheris's libFuzzer gets no coverage beside GCC's ASan runtime (the corpus stayed at one 1-byte
        # input, the seeds unread) and its own ASan (asan_with_fuzzer.so) cannot be loaded with GCC's
        # ("incompatible ASan runtimes"; no clang here): this step runs on the regular scanner build in
        # src/, coverage-guided over the Python layer; a memory error shows only as a crash there
        if ls src/proftab/io/_kineto*.so >/dev/null 2>&1; then
            LD_PRELOAD= PYTHONPATH="$PWD/src" "$VENV/bin/python" tests/fuzz/atheris_target.py -max_total_time="$SECS" \
                -rss_limit_mb=4096 -artifact_prefix="$WORK/logs/" "$WORK/corpus" > "$WORK/logs/atheris.log" 2>&1 \
                || echo "atheris found a crash: see $WORK/logs" >&2
            grep -E "seed corpus|INITED|DONE|ERROR" "$WORK/logs/atheris.log" >&2 || true
        else
            echo "atheris: no scanner built in src/ (python setup.py build_ext --inplace): skipped" >&2
        fi
    fi
else
    echo "atheris does not install here: skipped" >&2
fi
echo "results: $OUT, logs: $WORK/logs" >&2
