"""Read Inductor's provenance artifacts: which FX nodes, aten ops and source lines each generated kernel came from.

Inductor (torch.compile) writes, when `provenance_tracking_level >= 1` (`INDUCTOR_PROVENANCE=1`, or
`TORCH_COMPILE_DEBUG=1`):

- `inductor_provenance_tracking_node_mappings.json` (`cppCodeToPost`: kernel `name:handle` -> the
  post-grad FX nodes it computes; `postToPre`: post-grad node -> the pre-grad (dynamo) nodes), in
  the debug directory (`TORCH_COMPILE_DEBUG=1`) and as an artifact of the structured trace log
  (`TORCH_TRACE=DIR`, the file tlparse reads);
- the post-grad graph (`fx_graph_transformed.py` in the debug directory, the
  `inductor_post_grad_graph` artifact of the log): each node's aten op, shape and the
  `# File: PATH:LINE in FUNC, code: ...` line of the model source it was traced from;
- the kernels' Python stacks (`inductor_provenance_tracking_kernel_stack_traces`, log only) and
  the dynamo graph (`dynamo_output_graph`, log only), from which the nn.Module path is derived.

`read_provenance` turns them into one frame, one row per (graph, kernel, node); docs/compiled.md.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from proftab.exceptions import TraceError
from proftab.io.inductor_graph import FX_NODE_LINE, fits_int64, kernel_bytes, node_flops, parse_graph

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.trace import Trace

__all__ = ["MAPPINGS_FILE", "POST_GRAD_FILE", "PROVENANCE_COLUMNS", "PROVENANCE_TABLE", "graph_kind",
           "module_of_stack", "read_provenance", "with_provenance"]

#: the Trace table the provenance is kept in (`tr.collect(PROVENANCE_TABLE)`, read by `tr.compiled`)
PROVENANCE_TABLE = "compile_provenance"
MAPPINGS_FILE = "inductor_provenance_tracking_node_mappings.json"
POST_GRAD_FILE = "fx_graph_transformed.py"

#: the columns of the provenance frame (`tr.collect("compile_provenance")`)
PROVENANCE_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "compile_id": pl.String,          # "frame/compile" as in `Torch-Compiled Region: 0/0` (log only)
    "graph": pl.String,               # "forward" or "backward" (AOTAutograd's backward graph: `tangents_*` inputs)
    "artifact": pl.String,            # the file the mapping came from
    "kernel": pl.String,              # Inductor's kernel name (`cpp_fused_gelu_view_2`, `extern_kernels.addmm`)
    "handle": pl.Int64,               # Inductor's provenance debug handle of the kernel call
    "node": pl.String,                # post-grad FX node
    "aten_op": pl.String,             # `aten::mul`; null for non-aten nodes (getitem)
    "shape": pl.String,               # the node's value type as the graph prints it (`f32[8, 4, 64]`)
    "pre_grad_nodes": pl.List(pl.String),
    "pre_grad_op": pl.String,         # torch-level op of the first pre-grad node (`aten::layer_norm`), as eager runs
    "source_file": pl.String,
    "source_line": pl.Int64,
    "source_function": pl.String,
    "source_code": pl.String,
    "module": pl.String,              # nn.Module path (`mlp.fc1`), "" for the root module, null when unknown
    "node_flops": pl.Int64,           # GEMM / convolution FLOPs of the node (`inductor_graph.node_flops`), else null
    "kernel_read_bytes": pl.Int64,    # the kernel's modelled reads (`inductor_graph.kernel_bytes`), per kernel
    "kernel_write_bytes": pl.Int64,   # ... and writes; null: no model (sizes unknown, a prep kernel of an extern op)
    "kernel_flops": pl.Int64,         # Σ node_flops of the kernel's nodes; null when none has FLOPs or a prep kernel
}

_FILE_RE = re.compile(r"^\s*# File: (?P<file>.+?):(?P<line>\d+) in (?P<func>[^,]+), code: (?P<code>.*)$")
_ATEN_RE = re.compile(r"^torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)\.\w+\(")
_LOG_HEAD_RE = re.compile(r"^[VIWE]\d{4} [\d:.]+ +\d+ [^\]]*\] (?P<json>\{.*\})\s*$")
_PARAM_RE = re.compile(r"\bl_self_((?:modules_\w+?_)*)(?:parameters|buffers)_\w+?_\b")
_STACK_FRAME_RE = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)$')


@dataclass
class _Graph:
    """What the artifacts say about one compiled graph."""

    artifact: str
    compile_id: str | None = None
    graph: str = "forward"
    mappings: dict[str, object] = field(default_factory=dict)
    post_grad: str = ""
    pre_grad: str = ""
    stacks: dict[str, list[str]] = field(default_factory=dict)


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return data.decode("utf-8", errors="replace")
    except OSError as exc:
        msg = f"cannot read the provenance artifact ({exc.strerror or exc})"
        raise TraceError(msg, path=path) from None


def _json(text: str, path: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"not valid JSON ({exc.msg})"
        raise TraceError(msg, path=path, offset=exc.pos) from None
    if not isinstance(value, dict):
        msg = "expected a JSON object"
        raise TraceError(msg, path=path)
    return value


def _log_graphs(path: str) -> list[_Graph]:
    """The graphs of a structured trace log (`TORCH_TRACE`): artifacts by (frame_id, frame_compile_id)."""
    graphs: list[_Graph] = []
    current: dict[str, _Graph] = {}  # compile id -> its latest graph
    lines = _read_text(path).split("\n")
    i = 0
    while i < len(lines):
        m = _LOG_HEAD_RE.match(lines[i])
        i += 1
        if m is None:
            continue
        try:
            head = json.loads(m.group("json"))
        except json.JSONDecodeError:
            continue
        payload: list[str] = []
        while i < len(lines) and lines[i].startswith("\t"):
            payload.append(lines[i][1:])
            i += 1
        if "frame_id" not in head:
            continue
        cid = f"{head['frame_id']}/{head.get('frame_compile_id', 0)}"
        text = "\n".join(payload)
        name = head["artifact"].get("name") if isinstance(head.get("artifact"), dict) else None
        g = current.get(cid)
        if g is None or (name == "inductor_post_grad_graph" and g.post_grad):
            # one compile id, several Inductor graphs in log order: AOTAutograd's forward, then its backward
            g = _Graph(artifact=path, compile_id=cid, pre_grad=g.pre_grad if g is not None else "")
            current[cid] = g
            graphs.append(g)
        if name == "inductor_provenance_tracking_node_mappings":
            g.mappings = _json(text, path)
        elif name == "inductor_provenance_tracking_kernel_stack_traces":
            stacks = _json(text, path)
            g.stacks = {str(k): [str(s) for s in v] for k, v in stacks.items() if isinstance(v, list)}
        elif name == "inductor_post_grad_graph":
            g.post_grad = text
            g.graph = graph_kind(text)
        elif "dynamo_output_graph" in head:
            g.pre_grad = text
    return [g for g in graphs if g.mappings or g.stacks]


def graph_kind(post_grad: str) -> str:
    """`"backward"` when the post-grad graph's inputs include AOTAutograd's `tangents_N` (the incoming
    gradients, which only a backward graph takes), else `"forward"`."""
    head = next((line for line in post_grad.split("\n") if line.lstrip().startswith("def forward(")), "")
    return "backward" if re.search(r"\btangents_\d+\b", head) else "forward"


def _dir_graph(mapping_path: str) -> _Graph:
    """One graph of a `TORCH_COMPILE_DEBUG` directory: the mapping file and the post-grad graph beside it."""
    g = _Graph(artifact=mapping_path, mappings=_json(_read_text(mapping_path), mapping_path))
    for name in (POST_GRAD_FILE, POST_GRAD_FILE + ".gz"):  # a gzip copy is read the same
        post = os.path.join(os.path.dirname(mapping_path), name)
        if os.path.isfile(post):
            g.post_grad = _read_text(post)
            g.graph = graph_kind(g.post_grad)
            break
    return g


def _is_log(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith((".log", ".log.gz")) or name.startswith("dedicated_log_torch_trace")


def _graphs(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[_Graph]:
    items = [os.fspath(source)] if isinstance(source, str | os.PathLike) else [os.fspath(s) for s in source]
    logs: list[str] = []
    mappings: list[str] = []
    for item in items:
        if os.path.isdir(item):
            for root, _dirs, files in sorted(os.walk(item)):
                for f in sorted(files):
                    p = os.path.join(root, f)
                    if f == MAPPINGS_FILE:
                        mappings.append(p)
                    elif _is_log(p):
                        logs.append(p)
        elif not os.path.exists(item):
            msg = "no such provenance artifact"
            raise TraceError(msg, path=item, hint="pass the TORCH_COMPILE_DEBUG directory, a TORCH_TRACE log or "
                                                  f"{MAPPINGS_FILE}")
        elif os.path.basename(item).startswith(MAPPINGS_FILE.removesuffix(".json")):
            mappings.append(item)
        else:
            logs.append(item)
    graphs = [g for p in logs for g in _log_graphs(p)]
    if not graphs:  # the log holds the same mappings and more (stacks, the dynamo graph): prefer it
        graphs = [_dir_graph(p) for p in mappings]
    if not graphs:
        msg = f"no Inductor provenance found (no {MAPPINGS_FILE}, no TORCH_TRACE log with its artifact)"
        raise TraceError(msg, path=", ".join(items),
                         hint="record with INDUCTOR_PROVENANCE=1 and TORCH_COMPILE_DEBUG=1 (or TORCH_TRACE=DIR); "
                              "docs/compiled.md")
    return graphs


def _post_grad_nodes(text: str) -> dict[str, tuple[str | None, str | None, tuple[str, int, str, str] | None]]:
    """Post-grad graph text -> node: (aten op, shape, (file, line, function, code) or None)."""
    out: dict[str, tuple[str | None, str | None, tuple[str, int, str, str] | None]] = {}
    source: tuple[str, int, str, str] | None = None
    for line in text.split("\n"):
        if not line.strip():
            source = None
            continue
        if (f := _FILE_RE.match(line)) is not None:
            source = (f.group("file"), int(f.group("line")), f.group("func").strip(), f.group("code").strip())
            continue
        if (n := FX_NODE_LINE.match(line)) is None or line.lstrip().startswith(("def ", "class ", "#", "return")):
            continue
        a = _ATEN_RE.match(n.group("rhs"))
        op = f"{a.group('ns')}::{a.group('op')}" if a else None
        out[n.group("node")] = (op, n.group("type"), source)
    return out


_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "@": "matmul", "//": "floor_divide", "**": "pow"}


def _pre_grad_op(rhs: str) -> str | None:
    """The aten name of a dynamo graph node's call: `torch.nn.functional.layer_norm(` -> `aten::layer_norm`,
    `x.flatten(2)` -> `aten::flatten`, `a + b` -> `aten::add`; None for `getitem` and the like."""
    if (m := re.match(r"^(?:torch|operator)[\w.]*\.(\w+)\(", rhs)) is not None:
        return f"aten::{m.group(1).lstrip('_')}"
    if (m := re.match(r"^\w+ (\*\*|//|[+\-*/@]) ", rhs)) is not None:
        return f"aten::{_BINARY[m.group(1)]}"
    if (m := re.match(r"^\w+\.(\w+)\(", rhs)) is not None:
        return f"aten::{m.group(1)}"
    return None


def _pre_grad_nodes(text: str) -> dict[str, tuple[str | None, str | None]]:
    """Dynamo graph text -> pre-grad node: (module path of the parameters / buffers it reads, its aten op)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for line in text.split("\n"):
        if (n := FX_NODE_LINE.match(line)) is None:
            continue
        rhs = n.group("rhs").split(";")[0]
        paths = {m.group(1).removeprefix("modules_").removesuffix("_").replace("_modules_", ".")
                 for m in _PARAM_RE.finditer(rhs)}
        out[n.group("node")] = (paths.pop() if len(paths) == 1 else None, _pre_grad_op(rhs))
    return out


def _call_name(text: str) -> tuple[str | None, bool]:
    """`self.NAME(...)` at the start of `text`: (NAME, whether that call is all of `text`)."""
    m = re.match(r"self\.([A-Za-z_]\w*)\(", text)
    if m is None:
        return None, False
    depth = 0
    for i in range(m.end() - 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:  # the call's closing parenthesis; unbalanced `)` after it are the enclosing calls' own
            return m.group(1), text[i + 1:].strip().strip(")") == ""  # (the carets overshoot into them)
    return m.group(1), False  # unbalanced (a highlight cut short): not one whole call


def module_of_stack(stack: str) -> tuple[str, int, str] | None:
    """Module path, line and file of one Inductor kernel stack trace (Python's traceback text with carets).

    Every frame but the innermost calls into a submodule's `forward`: its highlighted text
    starts with `self.NAME(`, so NAME is the next path component. The innermost frame adds NAME
    only when the highlighted text is exactly one `self.NAME(...)` call (a leaf module such as
    a Linear); otherwise the op is the frame's own module's (`relu(x) + x` inside `forward`).
    Returns None when the text is not such a stack.
    """
    lines = stack.rstrip("\n").split("\n")
    frames: list[tuple[str, int, str]] = []  # (file, line, highlighted text)
    i = 0
    while i < len(lines):
        m = _STACK_FRAME_RE.match(lines[i])
        if m is None:
            i += 1
            continue
        code = lines[i + 1] if i + 1 < len(lines) else ""
        carets = lines[i + 2] if i + 2 < len(lines) and set(lines[i + 2].strip()) <= set("^~") else ""
        if carets.strip():
            lo = len(carets) - len(carets.lstrip())
            hi = len(carets.rstrip())
            highlighted = code[lo:hi]
            i += 3
        else:
            highlighted = code.strip()
            i += 2
        frames.append((m.group("file"), int(m.group("line")), highlighted.strip()))
    if not frames:
        return None
    parts: list[str] = []
    for k, (_f, _l, text) in enumerate(frames):
        name, whole = _call_name(text)
        last = k == len(frames) - 1
        if name is not None and (not last or whole):
            parts.append(name)
    file, line, _ = frames[-1]
    return ".".join(parts), line, file


def _common_prefix(paths: list[str]) -> str:
    split = [p.split(".") if p else [] for p in paths]
    out: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        out.append(parts[0])
    return ".".join(out)


def _forward_stack_modules(g: _Graph, rows: list[dict[str, object]]) -> dict[str, str]:
    """Stack text -> module of the forward nodes that carry it, where that module is one.

    A forward kernel's stacks are its nodes' stacks; a stack's nodes are the kernel's nodes on
    the stack's innermost line. A stack whose nodes (over every forward kernel that carries it)
    have exactly one module maps to it; others are left out.
    """
    on_line: dict[tuple[str, object], set[str]] = {}  # (kernel key, source line) -> its nodes' modules
    for r in rows:
        key = f"{r['kernel']}:{r['handle']}" if r["handle"] is not None else str(r["kernel"])
        if r["module"] is not None:
            on_line.setdefault((key, r["source_line"]), set()).add(str(r["module"]))
    found: dict[str, set[str]] = {}  # linear in rows + stacks (one parse per distinct stack text)
    parsed: dict[str, tuple[str, int, str] | None] = {}
    for key, stacks in g.stacks.items():
        for stack in stacks:
            if stack not in parsed:
                parsed[stack] = module_of_stack(stack)
            where = parsed[stack]
            if where is not None:
                found.setdefault(stack, set()).update(on_line.get((key, where[1]), ()))
    return {stack: mods.pop() for stack, mods in found.items() if len(mods) == 1}


def _stack_only_rows(g: _Graph, key: str, stacks: list[str],
                     forward_modules: dict[str, str]) -> list[dict[str, object]]:
    """Rows of a kernel the mapping file does not name but the stack traces artifact does.

    torch 2.13 and 2.14 write an empty mapping (`{"version": 2.0}`) for AOTAutograd's backward
    graph, but the backward kernels' stacks: the stacks of the forward nodes each backward node
    was derived from (AOTAutograd copies them over). One row per distinct stack, with the
    innermost `file:line` and a module: the forward nodes' module where the forward graph carries
    the same stack text with one module (`forward_modules`), else `module_of_stack` of the text.
    Node, ops and perf models are null.
    """
    kernel, _, handle = key.rpartition(":")
    if not kernel or not handle.isdigit():
        kernel, handle = key, ""
    rows: list[dict[str, object]] = []
    for stack in sorted(set(stacks)):  # sorted: one order for the apportioning remainder
        found = module_of_stack(stack)
        module = forward_modules.get(stack, found[0] if found else None)
        rows.append({
            "compile_id": g.compile_id, "graph": g.graph, "artifact": g.artifact, "kernel": kernel,
            "handle": int(handle) if handle else None, "node": None, "aten_op": None, "shape": None,
            "pre_grad_nodes": [], "pre_grad_op": None,
            "source_file": found[2] if found else None, "source_line": found[1] if found else None,
            "source_function": None, "source_code": None, "module": module,
            "node_flops": None, "kernel_read_bytes": None, "kernel_write_bytes": None, "kernel_flops": None})
    return rows


def _graph_rows(g: _Graph, forward_modules: dict[str, str] | None = None) -> list[dict[str, object]]:
    code_to_post = g.mappings.get("cppCodeToPost") or {}
    post_to_pre = g.mappings.get("postToPre") or {}
    if not isinstance(code_to_post, dict) or not isinstance(post_to_pre, dict):
        msg = "cppCodeToPost / postToPre are not JSON objects"
        raise TraceError(msg, path=g.artifact)
    nodes = _post_grad_nodes(g.post_grad)
    pre_nodes = _pre_grad_nodes(g.pre_grad)
    graph = parse_graph(g.post_grad)
    computed_by: dict[str, set[str]] = {}
    for key, post in code_to_post.items():
        for n in post:
            computed_by.setdefault(str(n), set()).add(str(key))
    extern_nodes = {str(n) for key, post in code_to_post.items() if str(key).startswith("extern_kernels.")
                    for n in post}
    rows: list[dict[str, object]] = []
    for key, stacks in g.stacks.items():
        if key in code_to_post:
            continue
        rows += _stack_only_rows(g, key, stacks, forward_modules or {})
    for key, post in code_to_post.items():
        post_set = {str(n) for n in post}
        prep = not str(key).startswith("extern_kernels.") and post_set <= extern_nodes  # an extern op's input prep
        read_b, write_b = (None, None) if prep or not graph.nodes else kernel_bytes(graph, post_set, computed_by,
                                                                                    str(key))
        flops = [f for n in post_set if (f := node_flops(graph, n)) is not None]
        kernel_flops = None if prep or not flops else fits_int64(sum(flops))
        kernel, _, handle = str(key).rpartition(":")
        if not kernel or not handle.isdigit():
            kernel, handle = str(key), ""
        # the modules the kernel's stacks reach, by the line they end on
        by_line: dict[int, list[str]] = {}
        for stack in g.stacks.get(str(key), []):
            if (found := module_of_stack(stack)) is not None:
                by_line.setdefault(found[1], []).append(found[0])
        for node in sorted(str(n) for n in post):  # sorted: one order for the apportioning remainder
            op, shape, source = nodes.get(node, (None, None, None))
            pre = [str(p) for p in post_to_pre.get(node, [])]
            mods = sorted({m for p in pre if (m := pre_nodes.get(p, (None, None))[0]) is not None})
            pre_op = next((o for p in pre if (o := pre_nodes.get(p, (None, None))[1]) is not None), None)
            if len(mods) == 1:
                module: str | None = mods[0]
            elif source is not None and source[1] in by_line:
                module = _common_prefix(by_line[source[1]])
            else:
                module = None
            rows.append({
                "compile_id": g.compile_id, "graph": g.graph, "artifact": g.artifact, "kernel": kernel,
                "handle": int(handle) if handle else None, "node": node, "aten_op": op, "shape": shape,
                "pre_grad_nodes": pre, "pre_grad_op": pre_op,
                "source_file": source[0] if source else None, "source_line": source[1] if source else None,
                "source_function": source[2] if source else None, "source_code": source[3] if source else None,
                "module": module, "node_flops": node_flops(graph, node),
                "kernel_read_bytes": read_b, "kernel_write_bytes": write_b, "kernel_flops": kernel_flops,
            })
    return rows


def read_provenance(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> pl.DataFrame:
    """Read Inductor's provenance artifacts into one row per (graph, kernel, FX node).

    Parameters
    ----------
    source
        A `TORCH_COMPILE_DEBUG` / `TORCH_TRACE` directory (searched recursively), a structured
        trace log (plain or gzip), an `inductor_provenance_tracking_node_mappings.json`, or a
        list of those. A log is preferred to the mapping files: it also holds the stacks and
        the dynamo graph (the module paths) and names each graph's compile id.

    Returns
    -------
    pl.DataFrame
        `PROVENANCE_COLUMNS`, sorted by compile_id, graph, handle, kernel, node, source.

    Raises
    ------
    TraceError
        A path is missing or unreadable, a file is not valid JSON, or no provenance is found.
    """
    rows: list[dict[str, object]] = []
    forward: dict[str | None, dict[str, str]] = {}  # compile id -> its forward graph's stack modules
    for g in _graphs(source):  # a backward graph follows its forward one in the log
        got = _graph_rows(g, forward.get(g.compile_id) if g.graph == "backward" else None)
        if g.graph == "forward" and g.compile_id is not None:
            forward[g.compile_id] = _forward_stack_modules(g, got)
        rows += got
    return (pl.DataFrame(rows, schema=PROVENANCE_COLUMNS, orient="row") if rows
            else pl.DataFrame(schema=PROVENANCE_COLUMNS)).sort("compile_id", "graph", "handle", "kernel", "node",
                                                               "source_file", "source_line", nulls_last=True)


def with_provenance(trace: Trace, source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Trace:
    """`trace` plus the `compile_provenance` table read from `source` (`read_provenance`)."""
    from proftab.trace import Trace

    return Trace({**trace.tables, PROVENANCE_TABLE: read_provenance(source)}, trace.files)
