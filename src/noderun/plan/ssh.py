"""Plans for plain SSH hosts: one torchrun agent per host, started over the system ``ssh``.

Pure: hostfile text in, argv out. SSH joins the remote argv into one string that the far
side's shell splits again, so every word is quoted here (``shlex.quote``) and the remote
command is one string: ``cd CWD && exec env K=V … PYTHON GUARD -- torchrun …``. The ranks'
environment is explicit (``env``): the launch's own variables, ``--env K=V``, and the
allow-listed variables of the caller's environment; never the whole local environment.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
from collections.abc import Collection, Mapping, Sequence

from noderun.errors import UsageError
from noderun.plan.launch import Gang, LaunchPlan, NodeCommand

# started by path on every host, before the node's command (see noderun/ssh_guard.py)
SSH_GUARD = os.path.join(os.path.dirname(os.path.dirname(__file__)), "ssh_guard.py")
ENV_STDIN = "--env-stdin"  # the guard's flag: the first line of its stdin is the ranks' env
# variables of the caller's environment that reach the ranks on every host (documented)
FORWARDED = (
    "PYTHONPATH",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_*",
    "GLOO_*",
    "TORCH_*",
    "HF_*",
    "WANDB_*",
    "NODERUN_*",
)
# one connection per host for the checks and the launch; closed by noderun at the end
SSH_OPTIONS = (
    "BatchMode=yes",
    "ConnectTimeout=10",
    "ServerAliveInterval=5",
    "ServerAliveCountMax=3",
    "ControlMaster=auto",
    "ControlPath=/tmp/noderun-ssh-%C",
    "ControlPersist=30",
)


def parse_hostfile(text: str, source: str = "hostfile") -> list[tuple[str, int | None]]:
    """``host [slots=N]`` lines (Open MPI / DeepSpeed style); ``#`` comments, blank lines."""
    hosts: list[tuple[str, int | None]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        slots: int | None = None
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key in ("slots", "max_slots", "max-slots") and value.isdigit() and int(value) > 0:
                slots = int(value) if key == "slots" else slots
            else:
                raise UsageError(
                    f"{source} line {number}: cannot read {word!r}",
                    "write one host per line as `HOST` or `HOST slots=N`",
                )
        hosts.append((words[0], slots))
    if not hosts:
        raise UsageError(f"{source} names no host", "write one host per line: `HOST slots=N`")
    return hosts


def hosts_and_slots(
    hosts: Sequence[tuple[str, int | None]], nproc_per_node: int | None
) -> tuple[list[str], int]:
    """The host names (each once, in order) and the processes per host."""
    names = [name for name, _ in hosts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(
            f"host {twice[0]} is listed twice",
            "list each host once; give it more processes with slots=N or --nproc-per-node",
        )
    slots = {s for _, s in hosts if s is not None}
    if nproc_per_node is not None:
        return names, nproc_per_node
    if len(slots) > 1:
        raise UsageError(
            f"hosts have different slots ({', '.join(map(str, sorted(slots)))})",
            "give every host the same slots=N, or set --nproc-per-node",
        )
    return names, slots.pop() if slots else 1


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's variables that match ``FORWARDED``."""
    return {
        key: value
        for key, value in environ.items()
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in FORWARDED)
    }


def remote_command(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, python: str, guard: str | None
) -> str:
    """The one shell string SSH runs on the host (``guard=None``: the command bare, for
    short checks that end by themselves). With the guard, ``env`` is not in it: the guard
    reads it from its stdin (``ENV_STDIN``), where no other user can see it."""
    if guard:
        words = shlex.join([python, guard, ENV_STDIN, "--", *argv])
        return " ".join(["cd", shlex.quote(cwd), "&&", "exec", words])
    exports = [shlex.quote(f"{key}={value}") for key, value in sorted(env.items())]
    return " ".join(["cd", shlex.quote(cwd), "&&", "exec", "env", *exports, shlex.join(argv)])


def ssh_argv(host: str, remote: str, ssh: str = "ssh", config: str | None = None) -> list[str]:
    options = [item for option in SSH_OPTIONS for item in ("-o", option)]
    return [ssh, *(["-F", config] if config else []), *options, host, remote]


def plan_ssh(
    gang: Gang,
    hosts: Sequence[str],
    *,
    cwd: str,
    guard: str,
    env: Mapping[str, str],
    ssh_config: str | None = None,
    hidden: Collection[str] = (),
) -> LaunchPlan:
    """One torchrun agent per host, node 0 on ``hosts[0]`` (``gang.master_addr``); the ranks'
    variables travel on the connection (``stdin_env``), never on a command line; ``hidden``:
    names whose values ``--dry-run`` masks (``--env``), besides the secret-looking ones."""
    nodes = [
        NodeCommand(
            node_rank=node,
            host=host,
            argv=tuple(
                ssh_argv(
                    host,
                    remote_command(gang.agent_argv(node), {}, cwd, gang.python, guard),
                    config=ssh_config,
                )
            ),
            env={},
            label=host,
            remote=True,
            stdin_env=gang.rank_env(node, env),
            hidden=frozenset(hidden),
        )
        for node, host in enumerate(hosts)
    ]
    return gang.plan(nodes)
