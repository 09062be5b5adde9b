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
from noderun.verbs.options import (
    Option,
    from_torchrun,
    non_negative_int,
    port_number,
    positive_int,
    refused,
    switch,
    value,
)

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


def positive_seconds(text: str) -> float:
    """``--monitor-interval``: seconds > 0."""
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    return number


def _pet(*options: Option) -> tuple[Option, ...]:
    """torchrun's options, each also set by torchrun's PET_<DEST> (below NODERUN_<NAME>)."""
    return tuple(from_torchrun(option) for option in options)


# flags of torchrun that noderun takes; `noderun run` and `noderun submit` list them
ENTRY_OPTIONS = _pet(
    switch("-m", "--module", help="SCRIPT is a module, run as `python -m SCRIPT` (torchrun -m)"),
    switch(
        "--no-python",
        help="SCRIPT is an executable, run without python in front (torchrun --no-python)",
    ),
    switch(
        "--run-path",
        help="accepted (torchrun --run-path): every rank already runs SCRIPT with runpy in its "
        "own Python, through noderun's rank entry",
    ),
)
RESTART_OPTIONS = _pet(
    value(
        "--max-restarts",
        type=non_negative_int,
        default=0,
        help="restart the whole gang up to N times after a failure (not after exit 2, nor after "
        "the same failure twice); the script resumes if given --resume auto",
    ),
)
CONSOLE_OPTIONS = _pet(
    value(
        "--local-ranks-filter",
        type=ranks_filter,
        env=False,
        metavar="R[,R…]",
        help="show only these local ranks on the console (every rank's log is still written)",
    ),
    value(
        "-r",
        "--redirects",
        type=std_spec,
        env=False,
        metavar="STD",
        help="3 (or LR:3,…): keep those local ranks off the console, logs only",
    ),
    value(
        "-t",
        "--tee",
        type=std_spec,
        env=False,
        metavar="STD",
        help="accepted: noderun always tees stdout+stderr of every rank to <run dir>/logs",
    ),
)
LOG_DIR_OPTION = value(
    "--log-dir",
    type=Path,
    env=False,
    help="torchrun's log root: the run directory becomes a new LOG_DIR/<name>-… "
    "(use --run-dir to name it exactly)",
)
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")  # torch/numa/binding.py's modes
START_METHODS = ("spawn", "fork", "forkserver")
# torchrun's agent options noderun does not act on itself: given to every torchrun agent it
# starts (locally, over SSH, in SLURM's torchrun mode), as torchrun takes them; refused in srun
# mode, where no agent runs. Only these two are not read from PET_* (torchrun does not either).
_NOT_FROM_PET = ("logs_specs", "numa_binding")
AGENT_OPTIONS = tuple(
    o if o.name in _NOT_FROM_PET else from_torchrun(o)
    for o in (
        value("--monitor-interval", type=positive_seconds, env=False, metavar="SECONDS",
              help="torchrun agent: seconds between looks at its workers (torchrun's 0.1)"),
        value("--start-method", choices=START_METHODS, env=False,
              help="torchrun agent: how it starts workers (torchrun's spawn)"),
        value("--role", env=False, help="torchrun agent: the workers' ROLE_NAME (default)"),
        value("--local-addr", env=False, metavar="ADDR",
              help="torchrun agent: this node's address for the rendezvous (torchrun's FQDN)"),
        value("--logs-specs", env=False, metavar="NAME",
              help="torchrun agent: a `torchrun.logs_specs` entry point for its log files "
              "(noderun's rank logs come from the console and stay)"),
        value("--numa-binding", choices=NUMA_BINDINGS, env=False,
              help="torchrun agent: bind each worker to the CPUs near its GPU, as torchrun"),
        value("--signals-to-handle", env=False, metavar="SIG,SIG…",
              help="torchrun agent: signals it forwards to workers "
              "(torchrun's SIGTERM,SIGINT,SIGHUP,SIGQUIT)"),
        value("--shutdown-timeout", type=non_negative_int, env=False, metavar="SECONDS",
              help="torchrun agent: grace before SIGKILL of workers (torchrun's 30)"),
        switch("--virtual-local-rank",
               help="torchrun agent: LOCAL_RANK 0 in every worker, CUDA_VISIBLE_DEVICES its GPU"),
        value("--duplicate-stdout-filters", env=False, metavar="F,F…",
              help="torchrun agent: copy stdout lines matching any filter to a file"),
        value("--duplicate-stderr-filters", env=False, metavar="F,F…",
              help="torchrun agent: copy stderr lines matching any filter to a file"),
    )
)  # fmt: skip
AGENT_NAMES = tuple(option.name for option in AGENT_OPTIONS)
# torchrun's options noderun cannot honour, refused in one line (PET_<DEST> too): those of
# releases after the oldest one noderun supports may be absent from the installed torch
REFUSED_OPTIONS = (
    from_torchrun(
        refused(
            "--log-line-prefix-template",
            problem="is not used: noderun prefixes every console line with node:rank itself, "
            "and reads torchrun's own prefix to tell the ranks' lines apart",
            hint="drop it (each rank's lines are also in <run dir>/logs/rank<N>.log)",
        )
    ),
    refused(
        "--event-log-handler",
        problem="is taken: noderun reads torchrun's worker events on its console handler to "
        "name the rank that failed first",
        hint="drop it (the failed rank is named on the last line and in run.json)",
    ),
    refused(
        "--print-completion",
        problem="would print torchrun's completion, not noderun's",
        hint="use `noderun completion bash` (or zsh)",
    ),
)
TORCHRUN_OPTIONS = (
    *ENTRY_OPTIONS,
    *RESTART_OPTIONS,
    *CONSOLE_OPTIONS,
    *_pet(
        switch("--standalone", help="one node, rendezvous on a free local port (torchrun)"),
        LOG_DIR_OPTION,
        value("--rdzv-backend", env=False, help=argparse.SUPPRESS),
        value("--rdzv-endpoint", env=False, help=argparse.SUPPRESS),
        value("--rdzv-id", env=False, help="run id the ranks see (TORCHELASTIC_RUN_ID)"),
        value("--rdzv-conf", env=False, help=argparse.SUPPRESS),
    ),
    *AGENT_OPTIONS,
    *REFUSED_OPTIONS,
)
_SLURM_PICKS = "the job's first node is node 0 and SLURM numbers the nodes"
# torchrun's flags a submitted job cannot take: SLURM places the nodes and noderun's node
# entry runs the rendezvous on the first one
SUBMIT_REFUSED = (
    refused("--standalone", takes_value=False, problem="is for one node without a scheduler",
            hint="use --nodes 1"),
    refused("--node-rank", problem=f"is not used by a submitted job: {_SLURM_PICKS}",
            hint="drop it"),
    refused("--master-addr", problem=f"is not used by a submitted job: {_SLURM_PICKS}",
            hint="drop it (--master-port still picks the port)"),
    refused("--rdzv-backend", problem="is not used: noderun runs its own fixed-size rendezvous "
            "on the job's first node", hint="drop it (--master-port picks its port)"),
    refused("--rdzv-endpoint", problem=f"is not used by a submitted job: {_SLURM_PICKS}",
            hint="drop it, or give its port as --master-port"),
    refused("--rdzv-conf", problem="is not used by a submitted job",
            hint="--join-timeout SECONDS bounds how long nodes may take to arrive"),
)  # fmt: skip
SUBMIT_TORCHRUN_OPTIONS = (
    *ENTRY_OPTIONS,
    *RESTART_OPTIONS,
    *CONSOLE_OPTIONS,
    *_pet(
        LOG_DIR_OPTION,
        value("--rdzv-id", env=False, help="run id the ranks see (default: the job id)"),
    ),
    *AGENT_OPTIONS,
    *REFUSED_OPTIONS,
    *SUBMIT_REFUSED,
)

# How `noderun run` handles each option of torchrun's parser (torch.distributed.run's
# get_args_parser, by dest); tests/verbs/test_torchrun_table.py walks the installed torch's
# parser against it, so a new torchrun option fails the suite until it gets a row here.
NODERUN = "noderun"  # noderun does what torchrun's option asks itself
AGENT = "agent"  # passed to every torchrun agent noderun starts (refused in srun mode)
REFUSED = "refused"  # one line: why, and what to use
TORCHRUN_HANDLING: dict[str, str] = {
    "nnodes": NODERUN,  # N or N:N (also --nodes); elastic MIN:MAX refused
    "nproc_per_node": NODERUN,  # a number, gpu, cpu, auto; xpu refused
    "rdzv_backend": NODERUN,  # static and c10d: noderun's rendezvous on node 0; others refused
    "rdzv_endpoint": NODERUN,  # node 0's host:port; another host refused
    "rdzv_id": NODERUN,  # TORCHELASTIC_RUN_ID
    "rdzv_conf": NODERUN,  # join_timeout/timeout; membership keys refused
    "standalone": NODERUN,
    "max_restarts": NODERUN,  # noderun restarts the whole gang
    "module": NODERUN,
    "no_python": NODERUN,
    "run_path": NODERUN,  # ranks already run SCRIPT with runpy
    "log_dir": NODERUN,  # root of the run directory
    "redirects": NODERUN,  # 0 or 3 per local rank; splitting the streams refused
    "tee": NODERUN,  # always on
    "local_ranks_filter": NODERUN,
    "node_rank": NODERUN,  # nodes started by hand
    "master_addr": NODERUN,
    "master_port": NODERUN,
    **{name: AGENT for name in AGENT_NAMES},
    **{option.name: REFUSED for option in REFUSED_OPTIONS},  # torch 2.14's two new ones
}


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
    agent_flags: tuple[str, ...] = ()  # AGENT_OPTIONS given, as every torchrun agent gets them

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
        return [*argv, *self.agent_flags]

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


def agent_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The AGENT_OPTIONS ``args`` sets, as torchrun's flags (``--role=trainer``); refused in
    srun mode, where no torchrun agent runs."""
    flags: list[str] = []
    for option in AGENT_OPTIONS:
        given = _get(args, option.name)
        if given is None or given is False:
            continue
        flag = option.flags[0]
        flags.append(flag if given is True else f"{flag}={given}")
    mode = _get(args, "mode")
    if flags and str(getattr(mode, "value", mode)) == "srun":
        first = flags[0].partition("=")[0]
        raise UsageError(
            f"{first} is an option of torchrun's agent, and --mode srun starts every rank "
            "without one",
            f"use --mode torchrun, or drop {first}",
        )
    return tuple(flags)


def read_flags(args: argparse.Namespace) -> TorchrunFlags:
    """Check torchrun's flags in ``args`` (absent ones allowed) and map them; UsageError if not."""
    module, no_python = bool(_get(args, "module")), bool(_get(args, "no_python"))
    if module and no_python:
        raise UsageError(
            "--module and --no-python together: a module needs python",
            "use -m for a module, --no-python for an executable",
        )
    if _get(args, "run_path") and (module or no_python):
        raise UsageError(
            "--run-path with -m or --no-python: --run-path runs a script file",
            "drop --run-path (every rank already runs SCRIPT with runpy)",
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
        agent_flags=agent_flags(args),
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
    _same_port(master_port, port)
    return port


def hand_started_master(
    flags: TorchrunFlags, master_addr: str | None, master_port: int | None
) -> tuple[str | None, int | None]:
    """Node 0's address and port for a node started by hand: --master-addr/--master-port, or
    torchrun's --rdzv-endpoint HOST:PORT; given both, they must name the same node and port."""
    if flags.endpoint is None:
        return master_addr, master_port
    host, port = flags.endpoint
    _same_port(master_port, port)
    if master_addr and master_addr != host:
        given, endpoint = addresses.addresses(master_addr), addresses.addresses(host)
        if not given & endpoint:
            raise UsageError(
                f"--master-addr {master_addr} ({addresses.shown(given)}) and --rdzv-endpoint "
                f"{host}:{port} ({addresses.shown(endpoint)}) name different nodes",
                "pass one of them: node 0's name or address",
            )
    return master_addr or host, port


def _same_port(master_port: int | None, port: int) -> None:
    if master_port is not None and master_port != port:
        raise UsageError(
            f"--master-port {master_port} and --rdzv-endpoint port {port} disagree",
            "pass one of them",
        )


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
