"""The ``noderun`` command: parse, call one verb, print, exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from noderun import __version__
from noderun.errors import NoderunError
from noderun.verbs.options import check_config

VERBS = ("run", "verify", "submit", "explain", "doctor", "stacks", "check")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (problem; hint) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; hint: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="noderun", description=__doc__)
    parser.add_argument("--version", action="version", version=f"noderun {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    for verb in VERBS:
        module = __import__(f"noderun.verbs.{verb}", fromlist=["add_parser"])
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_config(args.verb)
        code: int = args.handler(args)
    except NoderunError as err:
        print(f"noderun: error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # output piped into `head` and closed early
        return 0
    except KeyboardInterrupt:
        print("noderun: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
