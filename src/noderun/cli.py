"""The ``noderun`` command: one verb per task; each verb resolves only its own options."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import MutableMapping, Sequence
from typing import NoReturn

from noderun import __version__
from noderun.cli_output import print_json, stdout_to_stderr
from noderun.errors import NoderunError, UsageError, os_error_line
from noderun.verbs.options import (
    CONFIG_ENV,
    DEFAULT_CONFIG,
    PET_PREFIX,
    HelpFormatter,
    OptionTable,
    add_verb,
    resolve_options,
)

VERBS = (
    "run",
    "submit",
    "verify",
    "explain",
    "doctor",
    "stacks",
    "check",
    "scale",
    "ls",
    "status",
    "logs",
    "cancel",
    "sweep",
    "completion",  # last: the verb that describes all the others
)
# --json: one object at the end, the rest on stderr
REDIRECTED_JSON = ("run", "submit", "scale", "sweep")

DESCRIPTION = (
    "noderun launches multi-node PyTorch training - on simulated nodes of this machine, inside "
    "a SLURM allocation, or as a SLURM job - and tells you whether a run went well and, if not, "
    "why and how to fix it."
)
EPILOG = (
    "`noderun VERB --help` lists a verb's options. An option can also be set by its NODERUN_* "
    f"variable (shown in the verb's help) or in the [VERB] table of ./{DEFAULT_CONFIG} (or the "
    f"file named by ${CONFIG_ENV}); a flag wins over the variable, the variable over the file. "
    "torchrun's options also read torchrun's PET_* variables (PET_NPROC_PER_NODE=2), between "
    "NODERUN_* and the file. Every --long-option is also accepted as --long_option."
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (problem; hint) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; hint: see `{self.prog} --help`\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every verb, or of the one ``argv`` names first: a verb's run imports only
    its own module (``noderun submit`` starts ~0.025 s sooner without run's backends)."""
    # completion describes every verb; any other verb builds only its own parser
    chosen = [argv[0]] if argv and argv[0] in VERBS[:-1] else VERBS
    parser = _Parser(
        prog="noderun",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"noderun {__version__}")
    sub = parser.add_subparsers(
        title="verbs", dest="verb", metavar="VERB", required=True, parser_class=_Parser
    )
    for verb in chosen:
        module = __import__(f"noderun.verbs.{verb}", fromlist=["OPTIONS", "main"])
        table: OptionTable = module.OPTIONS
        add_verb(sub, table, module.main, help=table.help, description=table.description)
    return parser


def _unrecognized(verb: str, unknown: Sequence[str]) -> UsageError:
    """An option ``verb`` does not take, naming the verbs that do (``--partition``: submit)."""
    flag = unknown[0].partition("=")[0]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    others = [name for name, p in sub.choices.items() if flag in p._option_string_actions]
    where = f" (an option of {', '.join(f'noderun {o}' for o in others)})" if others else ""
    return UsageError(
        f"noderun {verb} does not take {' '.join(unknown)}{where}",
        f"see `noderun {verb} --help`",
    )


def forget_pet(environ: MutableMapping[str, str]) -> None:
    """Drop torchrun's PET_* variables once the verb has read them: the torchrun agents
    noderun starts get what they asked for as flags, and must not read them again (a
    PET_RDZV_BACKEND would change the rendezvous noderun planned)."""
    for name in [k for k in environ if k.startswith(PET_PREFIX)]:
        del environ[name]


def _json_at_the_end(args: argparse.Namespace) -> int:
    """A verb whose --json is one object at the end: its own lines (and its ranks') go to
    stderr meanwhile; the object is printed even when the verb fails or is interrupted."""
    from noderun.verbs.launch_json import launch_result

    error = None
    with stdout_to_stderr():
        try:
            code: int = args.handler(args)
        except NoderunError as err:
            print(f"noderun: error: {err}", file=sys.stderr)
            code, error = err.exit_code, str(err)
        except KeyboardInterrupt:
            print("noderun: interrupted", file=sys.stderr)
            code, error = 130, "interrupted"
    result = getattr(args, "json_result", None) or launch_result(args, code, error)
    print_json(result)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        parser = build_parser(words)
        args, unknown = parser.parse_known_args(words)
        if unknown:
            raise _unrecognized(args.verb, unknown)
        args.root_parser = parser  # `completion` describes it
        resolve_options(args)  # after parsing: only the chosen verb reads its variables and file
        forget_pet(os.environ)
        if getattr(args, "json", False) and args.verb in REDIRECTED_JSON:
            return _json_at_the_end(args)
        code: int = args.handler(args)
    except NoderunError as err:
        print(f"noderun: error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # output piped into `head` and closed early
        return 0
    except OSError as err:  # noderun's own records (run.json, logs): one line, never a traceback
        print(f"noderun: error: {os_error_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("noderun: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
