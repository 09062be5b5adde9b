"""torchrun's command line on ``noderun run`` (and ``submit``): each flag mapped onto what
noderun does, or refused in one line naming what to use.

    torchrun --standalone --nproc-per-node gpu -m pkg.train --lr 1e-3
    noderun run --standalone --nproc-per-node gpu -m pkg.train --lr 1e-3     # same ranks, same env

noderun always tees every rank's stdout and stderr to ``<run dir>/logs/rank<N>.log`` and the
console, restarts the whole gang itself (``--max-restarts``), and runs its own fixed-size
rendezvous on node 0; the flags below are read with that in mind.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from noderun import rundir
from noderun.backends import addresses
from noderun.errors import UsageError
from noderun.plan.launch import Entry
from noderun.plan.run import NPROC_WORDS as NPROC_WORDS  # re-exported: verbs name them
from noderun.plan.run import resolve_nproc as resolve_nproc
from noderun.topology.contract import RankContract
from noderun.verbs.options import non_negative_int, port_number, positive_int, switch, value

RDZV_BACKENDS = ("static", "c10d")  # both give the same fixed gang; etcd is not run
# --rdzv-conf keys noderun can honour; the rest tune elastic membership noderun does not have
RDZV_CONF_JOIN = ("join_timeout", "timeout")
_STD_ALL = 3  # torchrun's Std.ALL: stdout and stderr


def nproc_spec(text: str) -> int | str:
    """``--nproc-per-node``: a count, or gpu/cpu/auto resolved on the node (as torchrun)."""
    if text in NPROC_WORDS:
        return text
    if text == "xpu":
        raise argparse.ArgumentTypeError("'xpu' is not supported by noderun; pass a number")
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number >= 1 or one of {', '.join(NPROC_WORDS)}"
        ) from None


def nnodes_spec(text: str) -> int:
    """``--nnodes N`` or torchrun's ``MIN:MAX`` with MIN == MAX: noderun's gang has a fixed size."""
    low, sep, high = text.partition(":")
    if sep and low != high:
        raise argparse.ArgumentTypeError(
            f"{text!r}: noderun runs a fixed number of nodes (no elastic MIN:MAX); pass one number"
        )
    return positive_int(low)


def local_cpus() -> int:
    """CPUs this process may use (cgroups/taskset respected), as torch's cpu_count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def local_gpus() -> int:
    """Visible accelerators (imports torch: call only for gpu/auto)."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return int(accelerator.device_count())
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def std_spec(text: str) -> dict[int, int] | int:
    """torchrun's ``Std.from_str``: ``3`` (all local ranks) or ``0:3,1:1`` (per local rank)."""
    try:
        if ":" not in text:
            number = int(text)
            if 0 <= number <= _STD_ALL:
                return number
        else:
            pairs = dict(
                (int(rank), int(std)) for rank, std in (item.split(":") for item in text.split(","))
            )
            if all(0 <= std <= _STD_ALL for std in pairs.values()):
                return pairs
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r} is not 0-3 or LOCAL_RANK:0-3,… (as torchrun)")


def ranks_filter(text: str) -> frozenset[int]:
    """``--local-ranks-filter 0,1``: local ranks whose output reaches the console."""
    try:
        ranks = frozenset(int(item) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of local ranks, e.g. 0 or 0,1"
        ) from None
    if any(rank < 0 for rank in ranks):
        raise argparse.ArgumentTypeError(f"{text!r} has a negative local rank")
    return ranks


# flags of torchrun that noderun takes; `noderun run` and `noderun submit` list them
ENTRY_OPTIONS = (
    switch("-m", "--module", help="SCRIPT is a module, run as `python -m SCRIPT` (torchrun -m)"),
    switch(
        "--no-python",
        "--no_python",
        help="SCRIPT is an executable, run without python in front (torchrun --no-python)",
    ),
)
RESTART_OPTIONS = (
    value(
        "--max-restarts",
        "--max_restarts",
        type=non_negative_int,
        default=0,
        help="restart the whole gang up to N times after a failure (not after exit 2, nor after "
        "the same failure twice); the script resumes if given --resume auto",
    ),
)
CONSOLE_OPTIONS = (
    value(
        "--local-ranks-filter",
        "--local_ranks_filter",
        type=ranks_filter,
        env=False,
        metavar="R[,R…]",
        help="show only these local ranks on the console (every rank's log is still written)",
    ),
)
TORCHRUN_OPTIONS = (
    *ENTRY_OPTIONS,
    switch("--standalone", help="one node, rendezvous on a free local port (torchrun)"),
    *RESTART_OPTIONS,
    *CONSOLE_OPTIONS,
    value(
        "--log-dir",
        "--log_dir",
        type=Path,
        env=False,
        help="torchrun's log root: the run directory becomes a new LOG_DIR/<name>-… "
        "(use --run-dir to name it exactly)",
    ),
    value(
        "-t",
        "--tee",
        type=std_spec,
        env=False,
        metavar="STD",
        help="accepted: noderun always tees stdout+stderr of every rank to <run dir>/logs",
    ),
    value(
        "-r",
        "--redirects",
        type=std_spec,
        env=False,
        metavar="STD",
        help="3 (or LR:3,…): keep those local ranks off the console, logs only",
    ),
    value("--rdzv-backend", "--rdzv_backend", env=False, help=argparse.SUPPRESS),
    value("--rdzv-endpoint", "--rdzv_endpoint", env=False, help=argparse.SUPPRESS),
    value("--rdzv-id", "--rdzv_id", env=False, help="run id the ranks see (TORCHELASTIC_RUN_ID)"),
    value("--rdzv-conf", "--rdzv_conf", env=False, help=argparse.SUPPRESS),
)


@dataclasses.dataclass(frozen=True)
class TorchrunFlags:
    """What torchrun's flags ask of noderun, checked."""

    entry: Entry = Entry.SCRIPT
    standalone: bool = False
    max_restarts: int = 0
    console_local_ranks: frozenset[int] | None = None  # --local-ranks-filter; None: all
    console_hidden: frozenset[int] | None = frozenset()  # --redirects'ed; None: all
    log_root: Path | None = None
    run_id: str | None = None
    endpoint: tuple[str, int] | None = None  # --rdzv-endpoint HOST:PORT
    join_timeout: float | None = None

    def run_argv(self) -> list[str]:
        """These flags, but the entry's, as ``noderun run`` options (a submitted job's)."""
        argv: list[str] = []
        if self.max_restarts:
            argv.append(f"--max-restarts={self.max_restarts}")
        if self.console_local_ranks is not None:
            ranks = ",".join(str(r) for r in sorted(self.console_local_ranks))
            argv.append(f"--local-ranks-filter={ranks}")
        if self.console_hidden is None:
            argv.append("--redirects=3")
        elif self.console_hidden:
            argv.append("--redirects=" + ",".join(f"{r}:3" for r in sorted(self.console_hidden)))
        if self.run_id:
            argv.append(f"--rdzv-id={self.run_id}")
        return argv

    def shown(self, local_rank: int) -> bool:
        """Whether ``local_rank``'s lines reach the console (its log gets them regardless)."""
        if self.console_hidden is None or local_rank in self.console_hidden:
            return False
        return self.console_local_ranks is None or local_rank in self.console_local_ranks


def _get(args: argparse.Namespace, name: str, default: object = None) -> object:
    return getattr(args, name, default)


def _hidden(args: argparse.Namespace) -> frozenset[int] | None:
    """Local ranks --redirects keeps off the console (None: all of them); stdout split from
    stderr is refused: noderun keeps a rank's two streams together."""
    redirects = _get(args, "redirects")
    if redirects is None or redirects == 0:
        return frozenset()
    if redirects == _STD_ALL:
        return None
    if isinstance(redirects, dict) and set(redirects.values()) <= {0, _STD_ALL}:
        return frozenset(rank for rank, std in redirects.items() if std == _STD_ALL)
    raise UsageError(
        "--redirects splitting stdout from stderr is not supported: noderun keeps both streams "
        "of a rank together in <run dir>/logs/rank<N>.log",
        "use --redirects 3 (all ranks to logs only) or --local-ranks-filter",
    )


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        return host.strip("[]"), port_number(port)
    except argparse.ArgumentTypeError:
        raise UsageError(
            f"--rdzv-endpoint {text!r} is not HOST:PORT", "e.g. --rdzv-endpoint node1:29500"
        ) from None


def _rdzv_conf(text: str) -> float | None:
    """``join_timeout=…`` (or the static ``timeout=…``) maps to --join-timeout; other keys tune
    elastic membership, which a fixed-size gang does not have."""
    joined: float | None = None
    for item in filter(None, text.split(",")):
        key, _, raw = item.partition("=")
        if key not in RDZV_CONF_JOIN:
            raise UsageError(
                f"--rdzv-conf {key} has no noderun equivalent: the gang has a fixed size and "
                "noderun runs its own rendezvous",
                "drop it; --join-timeout SECONDS bounds how long nodes may take to arrive",
            )
        try:
            joined = float(raw)
        except ValueError:
            raise UsageError(
                f"--rdzv-conf {item!r}: not a number of seconds", "e.g. join_timeout=60"
            ) from None
    return joined


def read_flags(args: argparse.Namespace) -> TorchrunFlags:
    """Check torchrun's flags in ``args`` (absent ones allowed) and map them; UsageError if not."""
    module, no_python = bool(_get(args, "module")), bool(_get(args, "no_python"))
    if module and no_python:
        raise UsageError(
            "--module and --no-python together: a module needs python",
            "use -m for a module, --no-python for an executable",
        )
    backend = _get(args, "rdzv_backend")
    if backend is not None and backend not in RDZV_BACKENDS:
        raise UsageError(
            f"--rdzv-backend {backend} is not used: noderun runs its own fixed-size rendezvous "
            "on node 0",
            "drop --rdzv-backend (noderun chooses the rendezvous and its port)",
        )
    log_root: Path | None = _get(args, "log_dir")  # type: ignore[assignment]
    if log_root is not None and _get(args, "run_dir") is not None:
        raise UsageError(
            "--log-dir and --run-dir together", "pass one: --run-dir names the run directory"
        )
    endpoint = _get(args, "rdzv_endpoint")
    conf = _get(args, "rdzv_conf")
    return TorchrunFlags(
        entry=Entry.MODULE if module else Entry.EXECUTABLE if no_python else Entry.SCRIPT,
        standalone=bool(_get(args, "standalone")),
        max_restarts=int(_get(args, "max_restarts", 0) or 0),  # type: ignore[call-overload]
        console_local_ranks=_get(args, "local_ranks_filter"),  # type: ignore[arg-type]
        console_hidden=_hidden(args),
        log_root=log_root,
        run_id=_get(args, "rdzv_id") or None,  # type: ignore[arg-type]
        endpoint=_endpoint(str(endpoint)) if endpoint else None,
        join_timeout=_rdzv_conf(str(conf)) if conf else None,
    )


def check_program(text: str, entry: Entry, cwd: Path | None = None) -> str:
    """The program every rank runs, checked here so a typo is one line and nothing starts:
    a script's absolute path, a module's name (its top package found from cwd or sys.path,
    nothing imported), or an executable (on PATH or a path)."""
    if entry is Entry.MODULE:
        where = str(cwd or Path.cwd())
        if not _module_found(text, [where, *sys.path[1:]]):
            raise UsageError(
                f"module {text!r} not found (from {where} or this Python's packages)",
                "check the name, run from the folder that holds the package, or install it",
            )
        return text
    if entry is Entry.EXECUTABLE:
        if shutil.which(text) is None:
            raise UsageError(
                f"executable {text!r} not found or not executable",
                "give its path or put it on PATH (chmod +x for a file)",
            )
        return text
    script = Path(text)
    if not script.is_file():
        raise UsageError(f"script {text!r} not found", "check the path (relative to cwd)")
    return str(script.resolve())


def _module_found(name: str, path: list[str]) -> bool:
    """Whether ``python -m name`` finds a module, each package located on disk in turn
    (nothing imported: a package's ``__init__`` may be slow or need the GPU)."""
    search: list[str] | None = path
    parts = name.split(".")
    if parts[0] in sys.builtin_module_names:
        return len(parts) == 1
    for part in parts:
        if not part or search is None:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, search)
        if spec is None:
            return False
        search = list(spec.submodule_search_locations or []) or None
    return True


def run_name(program: str, entry: Entry) -> str:
    """The stem a new run directory is named after: ``pkg.train`` -> ``train``."""
    if entry is Entry.MODULE:
        return program.rsplit(".", 1)[-1]
    return Path(program).stem


def nnodes_for(args: argparse.Namespace, flags: TorchrunFlags) -> int | None:
    """--nnodes, or 1 with --standalone (torchrun's single-node mode)."""
    nnodes: int | None = args.nnodes
    if flags.standalone:
        if nnodes not in (None, 1):
            raise UsageError(
                f"--standalone runs one node but --nnodes is {nnodes}",
                "drop --standalone, or --nnodes",
            )
        return 1
    return nnodes


def run_dir_for(args: argparse.Namespace, flags: TorchrunFlags) -> Path:
    """--run-dir, else a new ``<root>/<name>-…`` (root: torchrun's --log-dir, or runs/)."""
    if args.run_dir is not None:
        return Path(args.run_dir).resolve()
    name = run_name(args.script, flags.entry)
    return rundir.new_run_dir(name, flags.log_root or Path("runs")).resolve()


def restart_env(attempt: int, max_restarts: int) -> dict[str, str]:
    """Variables every rank of ``attempt`` (0 = first start) sees; the rank entry maps them to
    TORCHELASTIC_RESTART_COUNT/MAX_RESTARTS, as torchrun's agent sets them."""
    return RankContract(restart_count=attempt, max_restarts=max_restarts).to_env()


def endpoint_port(
    flags: TorchrunFlags,
    node0: str,
    local_names: Sequence[str],
    master_port: int | None,
    master_addr: str | None = None,
) -> int | None:
    """The port an --rdzv-endpoint asks for, when its host is node 0 (``local_names``: node 0
    is this machine); --master-addr must be node 0 too. Names and addresses are compared as
    the addresses they resolve to; UsageError naming both otherwise."""
    if master_addr:
        _require_node0("--master-addr", master_addr, master_addr, node0, local_names)
    if flags.endpoint is None:
        return master_port
    host, port = flags.endpoint
    _require_node0("--rdzv-endpoint", f"{host}:{port}", host, node0, local_names)
    if master_port is not None and master_port != port:
        raise UsageError(
            f"--master-port {master_port} and --rdzv-endpoint port {port} disagree",
            "pass one of them",
        )
    return port


def hand_started_master(
    flags: TorchrunFlags, master_addr: str | None, master_port: int | None
) -> tuple[str | None, int | None]:
    """Node 0's address and port for a node started by hand: --master-addr/--master-port, or
    torchrun's --rdzv-endpoint HOST:PORT; given both, they must name the same node and port."""
    if flags.endpoint is None:
        return master_addr, master_port
    host, port = flags.endpoint
    if master_port is not None and master_port != port:
        raise UsageError(
            f"--master-port {master_port} and --rdzv-endpoint port {port} disagree",
            "pass one of them",
        )
    if master_addr and master_addr != host:
        given, endpoint = addresses.addresses(master_addr), addresses.addresses(host)
        if not given & endpoint:
            raise UsageError(
                f"--master-addr {master_addr} ({addresses.shown(given)}) and --rdzv-endpoint "
                f"{host}:{port} ({addresses.shown(endpoint)}) name different nodes",
                "pass one of them: node 0's name or address",
            )
    return master_addr or host, port


def _require_node0(flag: str, text: str, host: str, node0: str, local_names: Sequence[str]) -> None:
    if host in (node0, *local_names):
        return
    found = addresses.addresses(host)
    if not found:
        raise UsageError(
            f"{flag} {text}: {host} does not resolve here; noderun puts the rendezvous on "
            f"node 0 ({node0})",
            f"drop {flag}, or give node 0's name or address ({node0})",
        )
    if local_names:  # node 0 is this machine
        if any(a.is_loopback for a in found) or found & addresses.this_machine():
            return
        node0_found = addresses.this_machine()
    else:
        node0_found = addresses.addresses(node0)
        if found & node0_found:
            return
    raise UsageError(
        f"{flag} {text} ({addresses.shown(found)}) is not node 0 ({node0}: "
        f"{addresses.shown(node0_found)}); noderun puts the rendezvous on node 0",
        f"drop {flag}, or give node 0's name or address ({node0})",
    )
