"""Shared option parsing: every option also reads a NODERUN_* environment variable."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from noderun.errors import UsageError


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
    """Add ``--flag``; its default comes from NODERUN_<FLAG> when set (flag > env > default)."""
    dest = flag.lstrip("-").replace("-", "_")
    name = env_name(dest)
    raw = os.environ.get(name)
    if raw not in (None, ""):
        try:
            default = type(raw)
        except (argparse.ArgumentTypeError, ValueError) as err:
            raise UsageError(f"{name}={raw!r}: {err}", f"fix or unset {name}") from None
    parser.add_argument(flag, dest=dest, type=type, default=default, help=f"{help} [{name}]")
