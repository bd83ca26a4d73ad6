"""``graphfix`` command line: ``graphfix in.onnx out.onnx --passes all`` and subcommands.

Errors the user can fix (bad file, bad option) print one line and exit 2, with no traceback
unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from graphfix import __version__
from graphfix.commands import COMMANDS
from graphfix.errors import GraphfixError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphfix",
        description="Rewrite ONNX graphs that TensorRT's ONNX parser rejects, verified against onnxruntime.",
        epilog="'graphfix IN OUT [options]' is short for 'graphfix fix IN OUT [options]'.",
    )
    parser.add_argument("--version", action="version", version=f"graphfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        try:
            module = importlib.import_module(f"graphfix.commands.{name}")
        except ModuleNotFoundError as exc:  # a subcommand still being written; the rest work
            if exc.name != f"graphfix.commands.{name}":
                raise
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and progress details")
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] not in COMMANDS and not args_list[0].startswith("-"):
        args_list.insert(0, "fix")
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 2
    if not args.verbose:
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)  # its errors reach the user as graphfix's one line
    try:
        return int(args._module.run(args))
    except GraphfixError as exc:
        if args.verbose:
            raise
        print(f"graphfix: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("graphfix: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
