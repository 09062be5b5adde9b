"""Shared option parsing: flag > NODERUN_* variable > config file section > default.

The config file is ``$NODERUN_CONFIG`` or ``./noderun.toml``, one table per verb::

    [run]
    nnodes = 2
    nproc_per_node = 2
"""

from __future__ import annotations

import argparse
import functools
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noderun.errors import UsageError
from noderun.plan.stall import DEFAULT_STALL_TIMEOUT, OnStall, StallPolicy

CONFIG_ENV = "NODERUN_CONFIG"
DEFAULT_CONFIG = "noderun.toml"
# verb -> option names that may appear in its config table
_KNOWN: dict[str, set[str]] = {}


def config_path() -> Path | None:
    """The config file in force: $NODERUN_CONFIG (must exist) or ./noderun.toml if present."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise UsageError(
                f"{CONFIG_ENV}={explicit!r} is not a file", f"fix or unset {CONFIG_ENV}"
            )
        return path
    local = Path(DEFAULT_CONFIG)
    return local if local.is_file() else None


@functools.cache
def _load_config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(
            f"config file {path} is unreadable: {err}", "fix its TOML syntax"
        ) from None


def config_section(verb: str) -> dict[str, Any]:
    """The ``[verb]`` table of the config file ({} without a file)."""
    path = config_path()
    section = _load_config(path).get(verb, {})
    if not isinstance(section, dict):
        raise UsageError(f"[{verb}] in {path} is not a table", f"write it as [{verb}] key = value")
    return section


def check_config(verb: str) -> None:
    """Refuse keys of ``[verb]`` that are not options of the verb, listing the valid ones."""
    unknown = sorted(set(config_section(verb)) - _KNOWN.get(verb, set()))
    if unknown:
        raise UsageError(
            f"unknown option(s) {', '.join(unknown)} in [{verb}] of {config_path()}",
            f"valid: {', '.join(sorted(_KNOWN.get(verb, set()))) or 'none'}",
        )


def env_name(dest: str) -> str:
    """``nproc_per_node`` -> ``NODERUN_NPROC_PER_NODE``."""
    return f"NODERUN_{dest.upper()}"


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a one-line reason when not."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def seconds(text: str) -> float:
    """argparse type: a duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be 0 (off) or more seconds")
    return value


def add_stall_options(parser: argparse.ArgumentParser) -> None:
    """``--stall-timeout`` and ``--on-stall`` (``run`` and ``submit``)."""
    add_env_option(
        parser,
        "--stall-timeout",
        type=seconds,
        default=DEFAULT_STALL_TIMEOUT,
        help="seconds without progress (rank output, steps, metrics, CPU) before the stacks of "
        "every rank are taken and the straggler named; 0 = off",
    )
    add_env_option(
        parser,
        "--on-stall",
        type=on_stall,
        default=OnStall.REPORT,
        help="after a stall report: report (keep waiting) or kill (stop, exit 76)",
    )


def on_stall(text: str) -> OnStall:
    try:
        return OnStall(text)
    except ValueError:
        valid = ", ".join(a.value for a in OnStall)
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {valid}") from None


def stall_policy(args: argparse.Namespace) -> StallPolicy:
    """The stall policy the options ask for."""
    return StallPolicy(args.stall_timeout, OnStall(args.on_stall))


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 65535")
    return value


def add_env_option(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    type: Callable[[str], Any] = str,
    default: Any = None,
    help: str = "",
) -> None:
    """Add ``--flag``; its default comes from NODERUN_<FLAG>, else the config file's
    ``[verb]`` table, else ``default`` (a flag on the command line wins over all)."""
    dest = flag.lstrip("-").replace("-", "_")
    name = env_name(dest)
    verb = parser.prog.split()[-1]
    _KNOWN.setdefault(verb, set()).add(dest)
    raw = os.environ.get(name)
    source = name
    if raw in (None, ""):
        section = config_section(verb)
        value = section.get(dest, section.get(flag.lstrip("-")))
        raw = None if value is None else str(value)
        source = f"{dest} in [{verb}] of {config_path()}"
    if raw not in (None, ""):
        try:
            default = type(raw)
        except (argparse.ArgumentTypeError, ValueError) as err:
            raise UsageError(f"{source}={raw!r}: {err}", f"fix or unset {source}") from None
    parser.add_argument(flag, dest=dest, type=type, default=default, help=f"{help} [{name}]")


def add_script_arguments(parser: argparse.ArgumentParser) -> None:
    """``SCRIPT [ARGS…]``: everything after SCRIPT goes to the script untouched."""
    parser.add_argument("script", help="training script (.py)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for SCRIPT")


def existing_script(text: str) -> Path:
    """The training script as a Path, or a UsageError naming it."""
    script = Path(text)
    if not script.is_file():
        raise UsageError(f"script {text!r} not found", "check the path (relative to cwd)")
    return script
