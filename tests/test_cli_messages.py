"""Options that do nothing say so (exit 2), usage of the subcommand on a typo, install hints (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proftab.cli import main
from tests.conftest import BUNDLED

ROOT = Path(__file__).resolve().parents[1]
H100 = BUNDLED / "h100_bert_small.pt.trace.json.gz"
CPU = ROOT / "tests" / "data" / "gloo4" / "rank-0.json.gz"  # a CPU-only (gloo) trace


def _err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "want"), [
    (("critical-path", H100, "--what-if", "nosuchthing=0.5"), "what-if key 'nosuchthing' matches no segment kind"),
    (("critical-path", H100, "--rank", "5"), "--rank 5: the trace has no such rank; its ranks: 0"),
    (("critical-path", H100, "--window", "0", "10"), "--window 0 10: no event lies inside it; the trace spans"),
    (("check", H100, "--fail-on", "overrun"), "--fail-on changes what --strict fails on"),
    (("check", H100, "--allow", "rejected"), "--allow changes what --strict fails on"),
    (("memory", H100, "--device", "cuda:7"), "--device cuda:7: the trace has no [memory] events on it; its devices: "
                                             "cpu, cuda:0"),
    (("perf", CPU), "has no device activity (kernels, memcpy, memset): perf rates device time"),
    (("plot", "top", CPU, "--metric", "device", "-o", "x.html"), "--metric device: "),
])
def test_options_that_do_nothing_say_so(argv: tuple[str, ...], want: str, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = _err(capsys, *argv)
    assert rc == 2 and "proftab: error: " in err and want in err, err
    assert not (tmp_path / "x.html").exists()


def test_what_if_key_that_matches_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["critical-path", str(H100), "--what-if", "gemm=0.5", "--format", "csv"]) == 0
    assert "speedup" in capsys.readouterr().out
    assert main(["check", str(H100), "--strict", "--fail-on", "overrun"]) in (0, 1)


def test_a_typo_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, "summary", H100, "--limt", "5")
    assert rc == 2
    assert err.startswith("usage: proftab summary")
    assert "proftab summary: error: unrecognized arguments: --limt 5 (did you mean --limit?)" in err


def test_top_level_help_says_strict_is_damage_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit 1 on damage" in out and "any anomaly" not in out


def test_install_hint_from_a_checkout_and_a_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import proftab._dependencies as deps
    from proftab.exceptions import MissingDependencyError

    monkeypatch.setattr(deps, "_ROOT", ROOT)  # proftab run from this checkout (CI runs an installed copy)
    monkeypatch.chdir(ROOT)
    assert deps.install_hint("plot") == "pip install '.[plot]' (once proftab is on PyPI: pip install 'proftab[plot]')"
    monkeypatch.chdir(tmp_path)
    assert deps.install_hint("plot").startswith(f"pip install '{ROOT}[plot]'")
    monkeypatch.setattr(deps, "_ROOT", tmp_path)  # no checkout: an installed wheel, its extra's packages by name
    monkeypatch.setattr(deps, "_extra_requirements", lambda extra: ["altair>=5.4", "vl-convert-python>=1.6"])
    assert deps.install_hint("plot") == ("pip install 'altair>=5.4' 'vl-convert-python>=1.6' "
                                         "(once proftab is on PyPI: pip install 'proftab[plot]')")
    with pytest.raises(MissingDependencyError, match=r"plotting needs the no_such_mod package: pip install 'altair"):
        deps.import_optional("no_such_mod", extra="plot", what="plotting")


def test_extra_requirements_come_from_the_metadata() -> None:
    from importlib import metadata

    from proftab._dependencies import _extra_requirements

    try:
        metadata.requires("proftab")
    except metadata.PackageNotFoundError:
        pytest.skip("proftab is not installed (no metadata)")
    assert any(r.startswith("altair") for r in _extra_requirements("plot"))
    assert _extra_requirements("no-such-extra") == []


def test_source_sha256_is_filled_at_load_as_the_readme_says(tmp_path: Path) -> None:
    """Before: null after `pt.load` though the README listed it (only datasets had it)."""
    import hashlib

    import proftab as pt

    assert "its sha256 (hashed while read)" in (ROOT / "README.md").read_text()
    want = hashlib.sha256(H100.read_bytes()).hexdigest()
    assert pt.load(H100).files["source_sha256"].to_list() == [want]
    ds = pt.convert(str(H100), tmp_path / "ds", progress=False)
    assert pt.scan(ds).files["source_sha256"].to_list() == [want]


def test_the_cli_synopsis_lists_every_subcommand() -> None:
    """docs/cli.md's synopsis omitted `critical-path` (issue 25.13), then compiled, findings, report, mcp."""
    import re

    from proftab.cli import commands

    doc = (ROOT / "docs" / "cli.md").read_text()
    start = doc.index("```")
    synopsis = doc[start:doc.index("```", start + 3)]
    assert [n for n in commands() if not re.search(rf"^proftab {re.escape(n)}\b", synopsis, re.M)] == []
