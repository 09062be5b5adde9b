"""``srun … noderun run`` in a batch script: right with one task per node (one torchrun agent
each), or one task per rank with ``--mode srun``; several agents per node are a mistake.
(``noderun run`` without srun starts its own step and is right as well.)"""

from __future__ import annotations

from collections.abc import Iterator

_NODE_OPTIONS = ("--nodes", "-N")


def _srun_value(words: list[str], names: tuple[str, ...]) -> int | None:
    """An option's number (``--nodes=2-3`` -> 2), None when absent or not a number."""
    digits = (_srun_value_text(words, names) or "").split("-")[0]
    return int(digits) if digits.isdigit() else None


def _noderun_run(program: list[str]) -> list[str] | None:
    """The options after ``noderun run`` (or ``python -m noderun run``), else None."""
    name = program[0].rsplit("/", 1)[-1] if program else ""
    if name == "noderun" and program[1:2] == ["run"]:
        return program[2:]
    if program[1:4] == ["-m", "noderun", "run"]:
        return program[4:]
    return None


def noderun_under_srun(
    words: list[str], program: list[str], job_tasks_per_node: int | None
) -> Iterator[tuple[str, str, str]]:
    """(code, problem, fix) for an srun line that starts ``noderun run``; ``words`` is the
    whole command line, ``program`` what srun runs, ``job_tasks_per_node`` the #SBATCH layout."""
    options = _noderun_run(program)
    if options is None:
        return
    srun_words = words[: len(words) - len(program)]
    per_node = _srun_value(srun_words, ("--ntasks-per-node",))
    if per_node is None:
        tasks = _srun_value(srun_words, ("--ntasks", "-n"))
        nodes = _srun_value(srun_words, _NODE_OPTIONS)
        per_node = tasks // nodes if tasks and nodes else job_tasks_per_node
    mode = _srun_value_text(options, ("--mode",)) or "torchrun"
    if (per_node or 1) > 1 and mode == "torchrun":
        yield (
            "srun-noderun-agents",
            f"srun starts {per_node} `noderun run` tasks per node: {per_node} torchrun agents "
            "per node would each start their own ranks (noderun refuses it, exit 2)",
            "srun --ntasks-per-node=1 noderun run … (one agent per node), or add --mode srun "
            "for one task per rank",
        )
    nproc = _srun_value(options, ("--nproc-per-node", "--nproc_per_node"))
    if mode == "srun" and per_node and nproc not in (None, 1, per_node):
        yield (
            "srun-noderun-nproc",
            f"`noderun run --mode srun --nproc-per-node {nproc}` under srun with {per_node} "
            "task(s) per node: in srun mode every task is one rank",
            f"srun --ntasks-per-node={nproc} noderun run --mode srun …",
        )


def _srun_value_text(words: list[str], names: tuple[str, ...]) -> str | None:
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in names:
            return value if eq else (words[i + 1] if i + 1 < len(words) else None)
    return None
