"""The `proftab` command line: a registry of subcommands, one module each.

Contract
--------
A subcommand is a module `proftab.cli.<name>` that defines ``COMMAND = Command(...)``:
``add_arguments(parser)`` declares its options, ``run(args) -> int`` does the work and
returns the exit status. To add one, write the module and append its name to
`BUILTIN_COMMANDS`. Modules import heavy libraries inside ``run`` only, so that
``proftab --help`` stays fast.

Exit statuses: 0 success; 1 findings (``check --strict``) or a bug (any exception that is not
a `ProftabError` or an `OSError`: one line saying so, the traceback with ``--debug``); 2 bad
input or usage (`ProftabError`, a file that cannot be read: one line ``proftab: error: ...``
on stderr, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["BUILTIN_COMMANDS", "Command", "build_parser", "commands", "main"]

#: modules under `proftab.cli` that define a subcommand, in `--help` order
BUILTIN_COMMANDS: list[str] = ["summary", "check", "plot", "diff", "convert", "modules", "memory", "critical_path",
                              "perf", "compiled", "findings", "report", "mcp"]

_DESCRIPTION = """\
Exact, columnar tables from PyTorch profiler (Kineto / Chrome JSON) traces.

examples:
  proftab summary trace.pt.trace.json.gz                 torch's key_averages table
  proftab summary run/*.json --sort self_cuda_time_total --limit 20
  proftab summary trace.json.gz --format csv -o ops.csv  the key_averages columns as CSV
  proftab check trace.json.gz --strict                   CI gate: exit 1 on damage (truncation, rejected events...)
  proftab plot top trace.json.gz -o top.html             top ops chart (also timeline, tree, steps)
  proftab diff before.json.gz after.json.gz --limit 15   what changed, largest first
  proftab findings trace.json.gz                         what is wrong with the step, what to change
  proftab report trace.json.gz -o report.html            one offline page: findings, steps, ops, charts

Run `proftab COMMAND --help` for the options and examples of each command.
"""


@dataclass(frozen=True)
class Command:
    """One subcommand.

    Attributes
    ----------
    name
        The word typed after `proftab`.
    help
        One line for `proftab --help`.
    examples
        Example invocations (one per line, with a short comment) for `proftab NAME --help`.
    add_arguments
        Declares the subcommand's arguments on its parser.
    run
        Runs it on the parsed arguments; returns the exit status.
    """

    name: str
    help: str
    examples: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def commands() -> dict[str, Command]:
    """The registered subcommands by name (imports each module of `BUILTIN_COMMANDS`)."""
    out: dict[str, Command] = {}
    for mod_name in BUILTIN_COMMANDS:
        mod = importlib.import_module(f"proftab.cli.{mod_name}")
        cmd: Command = mod.COMMAND
        out[cmd.name] = cmd
    return out


def _common_parser() -> argparse.ArgumentParser:
    """Options every subcommand accepts (after the subcommand word)."""
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("output control")
    g.add_argument("--debug", action="store_true", help="print the traceback of an error")
    g.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no warnings on stderr (errors still print)")
    g.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress bar on stderr: auto = on a terminal for inputs of 16 MiB or more "
                        "(default: auto)")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The full `proftab` argument parser."""
    from proftab._version import __version__

    parser = argparse.ArgumentParser(
        prog="proftab", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"proftab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    common = _common_parser()
    for cmd in commands().values():
        p = sub.add_parser(
            cmd.name, help=cmd.help, description=f"{cmd.help}\n\nexamples:\n{cmd.examples}",
            formatter_class=argparse.RawDescriptionHelpFormatter, parents=[common])
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    parser.set_defaults(_subparsers=sub.choices)  # to report an unknown option with its subcommand's usage
    return parser


def _one_line(exc: BaseException) -> str:
    """The exception message on one line (a `Hint:` line is joined with '; '), control characters
    (of a file name or trace text it quotes) escaped."""
    from proftab.render.sanitize import sanitize_text

    text = str(exc).strip() or type(exc).__name__
    return sanitize_text("; ".join(part.strip() for part in text.splitlines() if part.strip()))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `proftab` command line; returns the exit status.

    Parameters
    ----------
    argv
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    from proftab.exceptions import ProftabError

    try:
        parser = build_parser()  # imports the subcommands, and with them Polars
    except KeyboardInterrupt:
        print("proftab: interrupted", file=sys.stderr)
        return 130
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # `summary t.json --limt 5`: the subcommand's usage, and the option meant
            import difflib

            sub = (args._subparsers or {}).get(getattr(args, "command", None), parser)
            options = [o for a in sub._actions for o in a.option_strings]
            guess = difflib.get_close_matches(extra[0].split("=")[0], options, n=1)
            sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (did you mean {guess[0]}?)" if guess else ""))
    except SystemExit as exc:  # --help, --version, usage errors (argparse prints them)
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    if getattr(args, "_run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args))
    except BrokenPipeError:  # `proftab summary t.json | head`: stop quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ProftabError, OSError) as exc:  # the user's input, options or files
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"proftab: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proftab: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # noqa: BLE001 - a bug (a Rust panic is a BaseException too)
        if isinstance(exc, SystemExit):
            raise
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"proftab: internal error: {type(exc).__name__}: {_one_line(exc)} (this is a bug in proftab; "
              "rerun with --debug for the traceback and report it)", file=sys.stderr)
        return 1
