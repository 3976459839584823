"""Perf models of Inductor's kernels from the post-grad graph: bytes a fused kernel moves, FLOPs of GEMMs and convs.

The post-grad graph (`fx_graph_transformed.py`, the `inductor_post_grad_graph` log artifact) names
every node's aten op, its value type (`f32[8, 4, 64][256, 64, 1]cpu`) and its arguments; the
provenance mapping names the nodes each kernel computes. From these:

- **bytes** of a generated kernel = the buffers it reads (values its nodes use that no node of
  the kernel computes: graph inputs, extern outputs, other kernels' outputs) + the buffers it
  writes (values its nodes compute that a node outside the kernel uses, or the graph returns),
  each buffer counted once at its size (numel x dtype size). View ops (`reshape`, `permute`...)
  are the buffer they view; a `getitem` of a multi-output node (`var_mean`) is its own buffer.
  A node another kernel recomputes is not written for it: a user reads a value from memory
  only when its own kernel (any of them, when the user is recomputed) does not compute it.
- **FLOPs** of `mm`, `addmm`, `bmm`, `baddbmm` (2·M·N·K per matrix) and `convolution`
  (2 · batch · numel(weight) · spatial size of the output, of the input when transposed),
  as torch's FLOP counter (`torch.utils.flop_counter`) counts them; other ops: none.

Sizes with symbols (dynamic shapes) give no figure (null). docs/compiled.md compares these with
Inductor's own figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from proftab.dtypes import FX_DTYPE_NAMES, bytes_of

__all__ = ["DTYPE_BYTES", "FX_NODE_LINE", "Graph", "GraphNode", "fits_int64", "kernel_bytes", "node_flops",
           "parse_graph", "value_bytes"]

#: bytes per element of the dtype prefixes FX prints in a value type (`f32[...]`)
DTYPE_BYTES = bytes_of(FX_DTYPE_NAMES)
#: aten ops whose result views its first argument's buffer (no memory of its own)
VIEW_OPS = frozenset({"view", "reshape", "_unsafe_view", "permute", "expand", "squeeze", "unsqueeze", "t",
                      "transpose", "as_strided", "slice", "select", "alias", "_reshape_alias", "unfold",
                      "view_as_real", "view_as_complex", "diagonal", "narrow", "detach", "unbind", "split",
                      "split_with_sizes", "chunk"})
_MM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "convolution"})

_SIG_RE = re.compile(r"(\w+): \"([^\"]*)\"")
#: one node line of an FX graph as Inductor prints it: `    name: "f32[8, 4]" = rhs` (the type optional)
FX_NODE_LINE = re.compile(r"^\s+(?P<node>[A-Za-z_]\w*)(?:: \"(?P<type>[^\"]*)\")? = (?P<rhs>.*)$")
_CALL_RE = re.compile(r"^torch\.ops\.(?P<ns>\w+)\.(?P<op>\w+)\.\w+\((?P<args>.*)\)$")
_GETITEM_RE = re.compile(r"^(?P<src>[A-Za-z_]\w*)\[(?P<i>\d+)\]$")
_TYPE_RE = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<sizes>[^\]]*)\]")
_IDENT_RE = re.compile(r"\b[A-Za-z_]\w*\b")
_INT64_MAX = 2**63 - 1


def fits_int64(value: int | None) -> int | None:
    """`value`, or None when it does not fit an int64 column (a hostile or absurd shape)."""
    return value if value is not None and 0 <= value <= _INT64_MAX else None


@dataclass
class GraphNode:
    """One post-grad node: its aten op (`mm`; `getitem`; None for others), value type, arguments."""

    name: str
    op: str | None
    vtype: str | None
    args: list[str] = field(default_factory=list)   # node / input names, in order
    arg_text: str = ""


@dataclass
class Graph:
    """A post-grad graph: its nodes, inputs (name -> value type) and returned names."""

    nodes: dict[str, GraphNode] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    users: dict[str, set[str]] | None = None   # filled by `_users`
    returned: set[str] = field(default_factory=set)
    getitems: dict[str, list[str]] = field(default_factory=dict)   # multi-output node -> its getitem nodes


def parse_graph(text: str) -> Graph:
    """The post-grad graph as `GraphNode`s (one pass over its lines)."""
    g = Graph()
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("def forward("):
            g.inputs.update(_SIG_RE.findall(stripped))
            continue
        if stripped.startswith("return "):
            g.outputs = [n for n in _IDENT_RE.findall(stripped[len("return "):]) if n in g.nodes or n in g.inputs]
            continue
        m = FX_NODE_LINE.match(line)
        if m is None or stripped.startswith("#"):
            continue
        rhs = m.group("rhs").split(";")[0].strip()
        known = g.nodes.keys() | g.inputs.keys()
        if (c := _CALL_RE.match(rhs)) is not None:
            args = [a for a in _IDENT_RE.findall(c.group("args")) if a in known]
            node = GraphNode(m.group("node"), c.group("op"), m.group("type"), args, c.group("args"))
        elif (gi := _GETITEM_RE.match(rhs)) is not None and gi.group("src") in known:
            node = GraphNode(m.group("node"), "getitem", m.group("type"), [gi.group("src")], gi.group("i"))
        else:
            node = GraphNode(m.group("node"), None, m.group("type"), [a for a in _IDENT_RE.findall(rhs) if a in known],
                             rhs)
        g.nodes[node.name] = node
    return g


def _sizes(vtype: str | None) -> tuple[str, list[int]] | None:
    """(dtype prefix, sizes) of a value type, None when missing or symbolic."""
    if not vtype or (m := _TYPE_RE.match(vtype)) is None:
        return None
    text = m.group("sizes").strip()
    try:
        sizes = [int(s) for s in text.split(",")] if text else []
    except ValueError:
        return None
    return m.group("dtype"), sizes


def value_bytes(vtype: str | None) -> int | None:
    """numel x dtype size of a value type (`f32[8, 4, 64]...` -> 8192), None when unknown."""
    s = _sizes(vtype)
    if s is None or s[0] not in DTYPE_BYTES:
        return None
    return math.prod(s[1]) * DTYPE_BYTES[s[0]]


def _vtype(g: Graph, name: str) -> str | None:
    if name in g.inputs:
        return g.inputs[name]
    node = g.nodes.get(name)
    return node.vtype if node is not None else None


def _base(g: Graph, name: str) -> str:
    """The buffer a value lives in: through view ops to the viewed value (inputs and other nodes: themselves)."""
    seen = 0
    while (node := g.nodes.get(name)) is not None and node.op in VIEW_OPS and node.args and seen < len(g.nodes):
        name = node.args[0]
        seen += 1
    return name


def _owner(g: Graph, name: str) -> str:
    """The node that computes a buffer: a getitem's multi-output node, else the buffer itself."""
    node = g.nodes.get(name)
    return node.args[0] if node is not None and node.op == "getitem" and node.args else name


def kernel_bytes(g: Graph, nodes: set[str], computed_by: dict[str, set[str]], kernel: str) -> tuple[
        int | None, int | None]:
    """(bytes read, bytes written) of the generated kernel `kernel` that computes the post-grad `nodes`.

    `computed_by`: node -> the kernels computing it (from the mapping), to tell a value read
    from memory from one its user's kernel recomputes. None, None when a size is unknown.
    O(size of the kernel's nodes and their arguments and users) after one O(graph) pass per graph.
    """
    mine = {n for n in nodes if n in g.nodes and g.nodes[n].op not in VIEW_OPS}
    reads: set[str] = set()
    for n in mine:
        for a in g.nodes[n].args:
            buf = _base(g, a)
            if _owner(g, buf) not in mine and buf not in mine:
                reads.add(buf)
    users, returned = _users(g)
    writes: set[str] = set()
    for buf in {b for n in mine for b in (n, *g.getitems.get(n, ()))}:
        us = users.get(buf, set())
        if g.nodes.get(buf) is not None and g.nodes[buf].vtype is None:
            continue  # a multi-output node: its getitems are the buffers
        producers = computed_by.get(_owner(g, buf), set())
        if buf in returned or any(_reads_from_memory(u, computed_by.get(u, set()), producers, mine, kernel)
                                  for u in us):
            writes.add(buf)
    writes |= {b for b in returned if b in mine}
    sizes_r = [value_bytes(_vtype(g, b)) for b in sorted(reads)]
    sizes_w = [value_bytes(_vtype(g, b)) for b in sorted(writes)]
    if any(s is None for s in sizes_r + sizes_w):
        return None, None
    read, written = (fits_int64(sum(s for s in sizes if s is not None)) for sizes in (sizes_r, sizes_w))
    return (read, written) if read is not None and written is not None else (None, None)


def _users(g: Graph) -> tuple[dict[str, set[str]], set[str]]:
    """Buffer -> the non-view nodes using it (through views), and the returned buffers; computed once per graph."""
    if g.users is None:
        users: dict[str, set[str]] = {}
        for node in g.nodes.values():
            if node.op in VIEW_OPS:
                continue
            for a in node.args:
                users.setdefault(_base(g, a), set()).add(node.name)
            if node.op == "getitem" and node.args:
                g.getitems.setdefault(node.args[0], []).append(node.name)
        g.users = users
        g.returned = {_base(g, o) for o in g.outputs}
    return g.users, g.returned


def _reads_from_memory(user: str, user_kernels: set[str], producers: set[str], mine: set[str], kernel: str) -> bool:
    """`user` needs the buffer from memory: one of its kernels other than `kernel` does not compute the buffer
    itself (`producers`: the kernels computing it; Inductor recomputes cheap values into several kernels), or it
    is in no kernel at all and not in this one (an extern call, an unmapped node)."""
    if not user_kernels:
        return user not in mine
    return any(k != kernel and k not in producers for k in user_kernels)


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments (brackets and parentheses nest)."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def node_flops(g: Graph, name: str) -> int | None:
    """FLOPs of one GEMM / convolution node as torch's FLOP counter counts them; None for other ops."""
    node = g.nodes.get(name)
    if node is None or node.op not in _MM_OPS:
        return None
    shapes = [_sizes(_vtype(g, a)) for a in node.args]
    out = _sizes(node.vtype)
    if out is None or any(s is None for s in shapes):
        return None
    dims = [s[1] for s in shapes if s is not None]
    if node.op in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = dims[-2], dims[-1]
        if len(a) < 2 or len(b) < 2:
            return None
        batch = math.prod(a[:-2])
        return fits_int64(2 * batch * a[-2] * a[-1] * b[-1])
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if len(dims) < 2 or len(dims[0]) < 3:
        return None
    x, w = dims[0], dims[1]
    parts = _split_args(node.arg_text)
    transposed = len(parts) > 6 and parts[6].strip() == "True"
    spatial = x[2:] if transposed else out[1][2:]
    return fits_int64(2 * x[0] * math.prod(w) * math.prod(spatial))
