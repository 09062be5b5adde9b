"""Each verb's options as one table: flags, type, default, help and whether NODERUN_* sets them.

A verb's parser is built from its table (``add_verb``); after argparse has chosen the verb, only
that verb's table is resolved (``resolve_options``): flag > ``NODERUN_<NAME>`` > torchrun's
``PET_<NAME>`` (for torchrun's options, read as torchrun reads it) > ``name = …`` in the
``[verb]`` table of the config file > default. So a bad variable or config entry breaks only the
verbs that read it, and ``--help`` never reads any. Every ``--long-option`` is also accepted as
``--long_option`` (torchrun's habit). The config file is ``$NODERUN_CONFIG`` or
``./noderun.toml``::

    [run]
    nnodes = 2
    nproc_per_node = 2
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import shlex
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from noderun.errors import UsageError
from noderun.plan.stall import DEFAULT_STALL_TIMEOUT, OnStall, StallPolicy

CONFIG_ENV = "NODERUN_CONFIG"
DEFAULT_CONFIG = "noderun.toml"
ENV_PREFIX = "NODERUN_"
PET_PREFIX = "PET_"  # torchrun's env fallback: PET_<DEST> for each of its options
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Option:
    """One row of a verb's table; build rows with ``value``, ``switch``, ``repeated``,
    ``positional``. ``settable`` rows also read NODERUN_<NAME> and the config file."""

    flags: tuple[str, ...]
    help: str
    type: Callable[[str], Any] = str
    default: Any = None
    settable: bool = False
    action: str | None = None  # None (takes a value), "store_true" or "append"
    nargs: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    pet: str | None = None  # torchrun's dest whose PET_<DEST> sets this option, as torchrun's
    refusal: tuple[str, str] | None = None  # (problem, hint): accepted by the parser, refused

    @property
    def name(self) -> str:
        """``--nproc-per-node`` -> ``nproc_per_node``: the attribute and the config key."""
        longs = [f for f in self.flags if f.startswith("--")] or list(self.flags)
        return longs[0].lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def names(self) -> tuple[str, ...]:
        """The name, then those of its other long spellings (``--nnodes``/``--nodes``): each is
        also a config key and a NODERUN_* variable of the same option."""
        longs = [f[2:].replace("-", "_") for f in self.flags if f.startswith("--")]
        return tuple(dict.fromkeys([self.name, *longs]))

    @property
    def pet_env(self) -> str | None:
        return PET_PREFIX + self.pet.upper() if self.pet else None

    @property
    def positional(self) -> bool:
        return not self.flags[0].startswith("-")

    def spellings(self) -> tuple[str, ...]:
        """The flags, each ``--long-flag`` also as ``--long_flag`` (as torchrun's)."""
        longs = [f for f in self.flags if f.startswith("--") and "-" in f[2:]]
        extra = ["--" + f[2:].replace("-", "_") for f in longs]
        return tuple(dict.fromkeys([*self.flags, *extra]))

    def convert(self, text: str) -> Any:
        """Text (a flag, a variable, a config value) -> value; ArgumentTypeError saying why not."""
        if self.action == "store_true":
            return boolean(text)
        if self.choices is not None and text not in self.choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(self.choices)}")
        try:
            return self.type(text)
        except (TypeError, ValueError):  # argparse would name this method instead of the type
            kind = getattr(self.type, "__name__", "value")
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind}") from None

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.positional:
            parser.add_argument(
                self.flags[0], help=self.help, nargs=self.nargs, metavar=self.metavar
            )
            return
        if self.refusal is not None:
            parser.add_argument(
                *self.spellings(),
                dest=self.name,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
                action=_Refused,
                nargs=0 if self.action == "store_true" else None,
                refusal=self.refusal,
            )
            return
        help = self.help
        if help != argparse.SUPPRESS:
            shown = getattr(self.default, "value", self.default)
            help += f" (default: {shown})" if shown not in (None, False, ()) else ""
            sources = [self.env] if self.settable else []
            sources += [self.pet_env] if self.pet_env else []
            help += f" [{', '.join(sources)}]" if sources else ""
        # SUPPRESS: an option not on the command line stays absent until resolve() fills it
        kwargs: dict[str, Any] = {"dest": self.name, "default": argparse.SUPPRESS, "help": help}
        if self.action == "store_true":
            kwargs["action"] = "store_true"
        else:
            kwargs.update(type=self.convert, metavar=self.metavar, action=self.action)
            if self.choices is not None:
                kwargs["metavar"] = self.metavar or "{" + ",".join(self.choices) + "}"
        parser.add_argument(*self.spellings(), **kwargs)


class _Refused(argparse.Action):
    """A flag noderun knows but cannot honour here: one line saying why and what to use."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.refusal: tuple[str, str] = kwargs.pop("refusal")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        problem, hint = self.refusal
        raise UsageError(f"{option_string} {problem}", hint)


def refused(*flags: str, problem: str, hint: str, takes_value: bool = True) -> Option:
    """A flag (torchrun's, or another verb's) refused in one line, never "unrecognized"."""
    return Option(
        flags,
        argparse.SUPPRESS,
        action=None if takes_value else "store_true",
        refusal=(problem, hint),
    )


def from_torchrun(option: Option, dest: str | None = None) -> Option:
    """``option`` also set by torchrun's ``PET_<DEST>`` (``dest``: torchrun's name, default
    the option's own), below NODERUN_<NAME>."""
    return dataclasses.replace(option, pet=dest or option.name)


def value(
    *flags: str,
    help: str,
    type: Callable[[str], Any] = str,
    default: Any = None,
    env: bool = True,
    metavar: str | None = None,
    choices: Sequence[str] | None = None,
) -> Option:
    """``--flag VALUE``; by default also set by NODERUN_<FLAG> and the config file.
    An Enum ``type`` takes its values as the choices."""
    if isinstance(type, enum.EnumMeta):
        members: list[enum.Enum] = list(type)
        choices = choices or tuple(str(member.value) for member in members)
    return Option(
        flags, help, type, default, settable=env, metavar=metavar,
        choices=tuple(choices) if choices else None,
    )  # fmt: skip


def env_pair(text: str) -> tuple[str, str]:
    """``--env NAME=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return key, value


def switch(*flags: str, help: str, env: bool = False) -> Option:
    """``--flag`` without a value (False unless given); ``env=True`` reads 1/0, true/false."""
    return Option(flags, help, default=False, settable=env, action="store_true")


def repeated(
    *flags: str,
    help: str,
    type: Callable[[str], Any] = str,
    metavar: str | None = None,
    env: bool = False,
) -> Option:
    """``--flag VALUE`` given any number of times; the values in order. ``env=True``: also a
    list in the config file, or NODERUN_<NAME> split as a shell would (flags replace both)."""
    return Option(flags, help, type, default=(), action="append", metavar=metavar, settable=env)


def positional(
    name: str, *, help: str, nargs: str | None = None, metavar: str | None = None
) -> Option:
    return Option((name,), help, nargs=nargs, metavar=metavar)


SCRIPT_ARGUMENTS = (  # SCRIPT [ARGS…]: everything after SCRIPT goes to the script untouched
    positional("script", help="training script (.py)"),
    positional("script_args", nargs=argparse.REMAINDER, help="arguments for SCRIPT"),
)


@dataclasses.dataclass(frozen=True)
class OptionTable:
    """One verb: its options, in the order ``--help`` shows them, and its help texts (the
    verbs list's line and the verb's own ``--help`` description)."""

    verb: str
    options: tuple[Option, ...]
    help: str = ""
    description: str = ""

    def settable(self) -> dict[str, Option]:
        return {o.name: o for o in self.options if o.settable}

    def find(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        for option in self.options:
            option.add_to(parser)

    def check_keys(self, section: Mapping[str, Any], where: str) -> None:
        """Refuse config keys that are not settable options, listing the valid ones."""
        valid = {name for o in self.settable().values() for name in o.names}
        unknown = sorted(set(section) - valid)
        if unknown:
            raise UsageError(
                f"unknown option(s) {', '.join(unknown)} in {where}",
                f"valid: {', '.join(sorted(valid)) or 'none'}",
            )

    def resolve(
        self,
        args: argparse.Namespace,
        environ: Mapping[str, str],
        section: Mapping[str, Any],
        where: str = "",
    ) -> None:
        """Fill every option absent from ``args``: variable, then ``section``, then default.
        A bad variable or entry is a UsageError naming it and the fix."""
        self.check_keys(section, where)
        # the options given as flags: an option that does not apply is refused only then
        args.given_options = frozenset(
            o.name for o in self.options if not o.positional and hasattr(args, o.name)
        )
        for option in self.options:
            if option.refusal is not None and option.pet_env and environ.get(option.pet_env):
                problem, hint = option.refusal  # torchrun would read it: never ignored
                raise UsageError(f"{option.pet_env} (torchrun's {option.flags[0]}) {problem}", hint)
            if option.positional or option.refusal is not None or hasattr(args, option.name):
                continue
            found = _from_outside(option, environ, section, where)
            default = list(option.default) if option.action == "append" else option.default
            setattr(args, option.name, default if found is None else found)


def _from_outside(
    option: Option, environ: Mapping[str, str], section: Mapping[str, Any], where: str
) -> Any:
    """The value from NODERUN_<NAME>, else torchrun's PET_<DEST>, else the config section; None
    when none sets it."""
    raw: Any = None
    source = option.env
    for name in option.names if option.settable else ():
        if raw in (None, ""):
            raw, source = environ.get(ENV_PREFIX + name.upper()), ENV_PREFIX + name.upper()
    if raw in (None, "") and option.pet_env:
        raw, source = environ.get(option.pet_env), option.pet_env
    for name in option.names if option.settable else ():
        if raw in (None, ""):
            raw, source = section.get(name), f"{name} in {where}"
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) and option.action == "store_true":
        return raw
    if option.action == "append":
        items = raw if isinstance(raw, list) else shlex.split(str(raw))
        try:
            return [option.convert(str(item)) for item in items]
        except (argparse.ArgumentTypeError, ValueError) as err:
            raise UsageError(f"{source}={raw!r}: {err}", f"fix or unset {source}") from None
    try:
        return option.convert(str(raw))
    except (argparse.ArgumentTypeError, ValueError) as err:
        raise UsageError(f"{source}={raw!r}: {err}", f"fix or unset {source}") from None


def boolean(text: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case)."""
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(_TRUE + _FALSE)}")


def config_path(environ: Mapping[str, str]) -> Path | None:
    """The config file in force: $NODERUN_CONFIG (must exist) or ./noderun.toml if present."""
    explicit = environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise UsageError(
                f"{CONFIG_ENV}={explicit!r} is not a file", f"fix or unset {CONFIG_ENV}"
            )
        return path
    local = Path(DEFAULT_CONFIG)
    return local if local.is_file() else None


def config_section(verb: str, path: Path | None) -> dict[str, Any]:
    """The ``[verb]`` table of the config file at ``path`` ({} without a file)."""
    if path is None:
        return {}
    try:
        section = tomllib.loads(path.read_text()).get(verb, {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UsageError(
            f"config file {path} is unreadable: {err}", "fix its TOML syntax"
        ) from None
    if not isinstance(section, dict):
        raise UsageError(f"[{verb}] in {path} is not a table", f"write it as [{verb}] key = value")
    return section


def resolve_options(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> None:
    """Resolve the chosen verb's table into ``args``; verbs with nothing settable read no file."""
    table: OptionTable = args.option_table
    path = config_path(environ) if table.settable() else None
    table.resolve(args, environ, config_section(table.verb, path), f"[{table.verb}] of {path}")


def add_verb(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    table: OptionTable,
    handler: Callable[[argparse.Namespace], int],
    *,
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """The verb's parser, built from its table; parsing it selects ``handler`` and the table."""
    parser: argparse.ArgumentParser = sub.add_parser(
        table.verb, help=help, description=description, formatter_class=HelpFormatter
    )
    table.add_to(parser)
    parser.set_defaults(handler=handler, option_table=table)
    return parser


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` lists ``--run-dir``, not its ``--run_dir`` twin (accepted all the same), and
    each verb beside its help (argparse measures the verbs without their own indent)."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        subactions = getattr(action, "_get_subactions", None)
        if action.help is not argparse.SUPPRESS and subactions is not None:
            widths = [len(self._format_action_invocation(s)) for s in subactions()]
            indent = self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, max(widths, default=0) + indent)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        strings = action.option_strings
        shown = [s for s in strings if "_" not in s or s.replace("_", "-") not in strings]
        if shown == list(strings):
            return super()._format_action_invocation(action)
        copy = argparse.Action(shown, action.dest, nargs=action.nargs, metavar=action.metavar)
        return super()._format_action_invocation(copy)


def refuse_unless_applies(
    args: argparse.Namespace, names: Sequence[str], problem: str, hint: str
) -> None:
    """Refuse the first of ``names`` given as a flag (not by a variable or the config file:
    those are shared by every mode) with ``--flag PROBLEM; hint: HINT``."""
    table: OptionTable = args.option_table
    given: frozenset[str] = getattr(args, "given_options", frozenset())
    for name in names:
        option = table.find(name)
        if name in given and option is not None:
            raise UsageError(f"{option.flags[0]} {problem}", hint)


def _whole_number(text: str, minimum: int, bound: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} {bound}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a one-line reason when not."""
    return _whole_number(text, 1, "must be at least 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (``--max-restarts``)."""
    return _whole_number(text, 0, "must be 0 or more")


def seconds(text: str) -> float:
    """argparse type: a duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be 0 (off) or more seconds")
    return value


NOTIFY_OPTION = repeated(  # `run`, `submit` and `sweep`
    "--notify",
    metavar="CMD|URL",
    help="on the run's end, failure, preemption or stall run shell command CMD with the "
    "run's summary as JSON on its stdin, or send it to an apprise URL (the notify extra); "
    "repeatable; a failing CMD is a warning, never the run's failure",
)
STALL_OPTIONS = (  # `run` and `submit`
    value(
        "--stall-timeout",
        type=seconds,
        default=DEFAULT_STALL_TIMEOUT,
        help="seconds without progress (rank output, steps, metrics, CPU) before the stacks of "
        "every rank are taken and the straggler named; 0 = off",
    ),
    value(
        "--on-stall",
        type=OnStall,
        default=OnStall.REPORT,
        help="after a stall report: report (keep waiting) or kill (stop, exit 76)",
    ),
)


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


def existing_script(text: str) -> Path:
    """The training script as a Path, or a UsageError naming it."""
    script = Path(text)
    if not script.is_file():
        raise UsageError(f"script {text!r} not found", "check the path (relative to cwd)")
    return script
