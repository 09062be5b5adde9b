"""Grouping stacks and naming the straggler or the deadlock (pure functions)."""

from __future__ import annotations

from noderun.stacks import Kind, RankStack, Snapshot, render
from noderun.stacks.analysis import spot_of
from noderun.stacks.model import Frame, frames_from_faulthandler, frames_from_py_spy

TORCH = "/venv/lib/python3.11/site-packages/torch"
SCRIPT = "/home/me/train.py"


def collective(name: str, line: int, function: str = "step") -> tuple[Frame, ...]:
    return (
        Frame(name, f"{TORCH}/distributed/distributed_c10d.py", 3252),
        Frame("_exception_logger.<locals>.wrapper", f"{TORCH}/distributed/c10d_logger.py", 83),
        Frame(function, SCRIPT, line),
        Frame("main", SCRIPT, 90),
        Frame("<module>", SCRIPT, 99),
    )


def loading(line: int = 17) -> tuple[Frame, ...]:
    return (
        Frame("load_batch", SCRIPT, line),
        Frame("step", SCRIPT, 40),
        Frame("main", SCRIPT, 90),
        Frame("<module>", SCRIPT, 99),
    )


def snap(stacks: dict[int, tuple[Frame, ...]], world_size: int | None = None) -> Snapshot:
    return Snapshot(
        tuple(RankStack(r, f"host{r // 2}", 100 + r, f) for r, f in stacks.items()),
        world_size if world_size is not None else len(stacks),
    )


def test_one_rank_outside_the_collective_is_the_straggler() -> None:
    snapshot = snap({0: collective("all_reduce", 42), 1: loading(), 2: collective("all_reduce", 42),
                     3: collective("all_reduce", 42)})  # fmt: skip
    verdict = snapshot.verdict()
    assert verdict.kind is Kind.STRAGGLER and verdict.ranks == (1,)
    assert verdict.line() == (
        "stalled-rank: rank 1 on host0 stuck in load_batch() at train.py:17 ← step(), "
        "while ranks 0,2,3 wait in all_reduce in step() at train.py:42 ← main()"
    )
    assert render(snapshot).splitlines() == [
        "ranks 0,2,3: all_reduce in step() at train.py:42 ← main()",
        "rank 1: load_batch() at train.py:17 ← step()   <- straggler",
    ]


def test_ranks_in_different_collectives_are_a_deadlock() -> None:
    snapshot = snap({0: collective("all_reduce", 42), 1: collective("all_gather", 44)})
    verdict = snapshot.verdict()
    assert verdict.kind is Kind.DEADLOCK and verdict.ranks == (0, 1)
    assert verdict.line().startswith("collective-deadlock: ranks call different collectives")
    assert "rank 0 in all_reduce in step() at train.py:42" in verdict.text
    assert "rank 1 in all_gather in step() at train.py:44" in verdict.text
    assert not any(g.straggler for g in snapshot.groups())


def test_a_missing_rank_is_named_when_the_others_wait() -> None:
    snapshot = snap({0: collective("all_reduce", 42), 1: collective("all_reduce", 42)}, 3)
    verdict = snapshot.verdict()
    assert verdict.kind is Kind.STRAGGLER and verdict.ranks == (2,)
    assert "rank 2 not running" in verdict.text
    assert render(snapshot).splitlines()[-1] == "rank 2: no live process found"


def test_everyone_at_the_same_place_names_no_straggler() -> None:
    snapshot = snap({0: collective("barrier", 50), 1: collective("barrier", 50)})
    assert snapshot.verdict().kind is Kind.WAITING
    assert [g.ranks for g in snapshot.groups()] == [(0, 1)]


def test_outside_collectives_the_minority_is_named() -> None:
    snapshot = snap({0: loading(17), 1: loading(17), 2: loading(23)})
    verdict = snapshot.verdict()
    assert verdict.kind is Kind.STRAGGLER and verdict.ranks == (2,)
    assert "unlike ranks 0,1 in load_batch() at train.py:17" in verdict.text


def test_spot_names_data_loading_and_ddp_backward() -> None:
    data = (
        Frame("_next_data", f"{TORCH}/utils/data/dataloader.py", 700),
        Frame("__next__", f"{TORCH}/utils/data/dataloader.py", 630),
        Frame("main", SCRIPT, 30),
    )
    assert spot_of(data).describe() == "data loading in main() at train.py:30"
    assert not spot_of(data).collective
    backward = (
        Frame("_engine_run_backward", f"{TORCH}/autograd/graph.py", 800),
        Frame("backward", f"{TORCH}/_tensor.py", 600),
        Frame("main", SCRIPT, 31),
    )
    assert spot_of(backward).collective


def test_noderun_runtime_frames_are_not_the_users() -> None:
    frames = (
        Frame("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 3252),
        Frame("_all_reduce", "/src/noderun/runtime/context.py", 100),
        Frame("all_reduce_mean", "/src/noderun/runtime/context.py", 80),
        Frame("train", SCRIPT, 12),
    )
    spot = spot_of(frames)
    assert spot.collective and spot.describe() == "all_reduce in train() at train.py:12"


def test_faulthandler_dump_main_thread_is_the_last_block() -> None:
    text = (
        "# noderun faulthandler pid=5 signal=12\n"
        "Thread 0x00007f9bf551c6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 982 in run\n'
        "\n"
        "Current thread 0x00007f9bf6061b80 (most recent call first):\n"
        f'  File "{SCRIPT}", line 17 in load_batch\n'
        f'  File "{SCRIPT}", line 40 in step\n'
    )
    assert frames_from_faulthandler(text) == (
        Frame("load_batch", SCRIPT, 17),
        Frame("step", SCRIPT, 40),
    )


def test_py_spy_json_main_thread() -> None:
    threads = [
        {"thread_name": "Thread-1", "os_thread_id": 7, "pid": 5, "frames": []},
        {
            "thread_name": "MainThread",
            "os_thread_id": 5,
            "pid": 5,
            "frames": [{"name": "load_batch", "filename": SCRIPT, "line": 17}],
        },
    ]
    assert frames_from_py_spy(threads) == (Frame("load_batch", SCRIPT, 17),)


def test_snapshot_json_round_trips_rank_stacks() -> None:
    snapshot = snap({0: collective("all_reduce", 42), 1: loading()})
    data = snapshot.to_dict()
    assert data["verdict"]["kind"] == "stalled-rank" and data["verdict"]["ranks"] == [1]
    assert [g["straggler"] for g in data["groups"]] == [False, True]
    again = [RankStack.from_dict(r) for r in data["ranks"]]
    assert again == sorted(snapshot.stacks, key=lambda s: s.rank)


def test_a_snapshot_without_any_stack_has_a_verdict() -> None:
    # the stall watch's fallback when taking stacks failed: it must still name a verdict
    verdict = Snapshot((), 2, ("stacks could not be taken: boom",)).verdict()
    assert verdict.kind is Kind.NONE and verdict.ranks == (0, 1)
