"""Checkpoints in one process: atomic layout, keep-k, resolve, exact resume, bad input."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import noderun
from noderun import checkpoint as public
from noderun.errors import UsageError
from noderun.runtime import checkpoint, rng
from noderun.runtime.training_state import Checkpointer, Position


def test_save_writes_marker_last_and_loads(tmp_path: Path) -> None:
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "epoch": 3}
    final = checkpoint.save_state(state, tmp_path, "epoch-0003", meta={"epoch": 3})
    assert final == tmp_path / "epoch-0003"
    assert sorted(p.name for p in final.iterdir()) == [".complete", "meta.json", "state.pt"]
    assert not list(tmp_path.glob(".*tmp*"))
    meta = json.loads((final / "meta.json").read_text())
    assert meta["format"] == "full" and meta["epoch"] == 3 and meta["tag"] == "epoch-0003"
    loaded = public.load(final)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["epoch"] == 3


def test_partial_checkpoints_are_never_latest_and_keep_k(tmp_path: Path) -> None:
    for epoch in range(1, 6):
        checkpoint.save_state(
            {"model": {"e": torch.tensor(epoch)}}, tmp_path, f"epoch-{epoch:04d}", keep=2
        )
    assert [p.name for p in checkpoint.checkpoints(tmp_path)] == ["epoch-0004", "epoch-0005"]
    # a crash after the rename, before the marker: a full-looking directory without .complete
    crashed = tmp_path / "epoch-0006"
    crashed.mkdir()
    torch.save({"model": {}}, crashed / "state.pt")
    (tmp_path / ".epoch-0007.tmp").mkdir()  # a crash while writing
    assert checkpoint.latest(tmp_path) == tmp_path / "epoch-0005"
    with pytest.raises(UsageError, match=r"epoch-0006 is incomplete \(no \.complete marker"):
        public.load(crashed)
    # writing the same tag again replaces the partial one
    checkpoint.save_state({"model": {"e": torch.tensor(6)}}, tmp_path, "epoch-0006", keep=2)
    assert public.load(checkpoint.latest(tmp_path))["model"]["e"] == 6  # type: ignore[arg-type]


def test_load_refuses_pickled_code(tmp_path: Path) -> None:
    """weights_only=True: a checkpoint that needs arbitrary unpickling is refused, not run."""
    final = checkpoint.save_state({"model": {}}, tmp_path, "epoch-0001")
    torch.save({"model": {}, "evil": Position(1, 2, 3)}, final / "state.pt")  # a dataclass
    with pytest.raises(UsageError, match=r"state\.pt is corrupt or not a torch checkpoint"):
        public.load(final)


def test_resolve(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert checkpoint.resolve(None, run) is None
    assert checkpoint.resolve("auto", run) is None  # first start of a requeued job
    first = checkpoint.save_state({"model": {}}, run / "checkpoints", "epoch-0001")
    second = checkpoint.save_state({"model": {}}, run / "checkpoints", "epoch-0002")
    assert checkpoint.resolve("auto", run) == second
    assert checkpoint.resolve(str(run), tmp_path / "other") == second  # a run directory
    assert checkpoint.resolve(first, run) == first
    with pytest.raises(UsageError, match=r"checkpoint .*nope does not exist; hint: pass"):
        checkpoint.resolve(tmp_path / "nope", run)
    with pytest.raises(UsageError, match="is a file, not a checkpoint directory"):
        checkpoint.resolve(second / "state.pt", run)
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(UsageError, match="has no complete checkpoint"):
        checkpoint.resolve(empty, run)


def test_rng_roundtrip_is_exact() -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    saved = rng.capture()
    expected = (random.random(), np.random.rand(3).tolist(), torch.rand(3))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    rng.restore(saved)
    assert (random.random(), np.random.rand(3).tolist()) == expected[:2]
    assert torch.equal(torch.rand(3), expected[2])


def _train(
    ctx: noderun.Context, resume: str | Path | None, stop_at: int | None, epochs: int = 2
) -> tuple[dict[str, torch.Tensor], Checkpointer]:
    """Tiny loop shaped like the examples: dropout (RNG), shuffling, AdamW, a per-step schedule."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(40, 5), torch.randn(40, 1))
    loader = ctx.loader(data, 4, shuffle=True, seed=0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.9)
    ckpt = Checkpointer(ctx, model, optimizer, scheduler, keep=10)
    start = ckpt.resume(resume)
    global_step = start.global_step
    for epoch in range(start.epoch + 1, epochs + 1):
        ctx.set_epoch(loader, epoch)
        for step, (x, y) in ckpt.steps(loader, epoch):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            scheduler.step()
            global_step += 1
            if global_step == stop_at:
                ckpt.save(Position(epoch - 1, step, global_step), {"seen": global_step}, wait=True)
                return {}, ckpt
        ckpt.save(Position(epoch, 0, global_step))  # committed in the background
    ckpt.wait()
    return {**model.state_dict(), "lr": torch.tensor(scheduler.get_last_lr())}, ckpt


@pytest.mark.parametrize("stop_at", [3, 10, 13])  # mid-epoch 1, end of epoch 1, mid-epoch 2
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path: Path, stop_at: int) -> None:
    ctx = noderun.init(run_dir=tmp_path / "a", environ={})
    baseline, _ = _train(ctx, None, None)
    ctx.run_dir = tmp_path / "b"
    _train(ctx, None, stop_at)
    resumed, ckpt = _train(ctx, "auto", None)
    assert ckpt.resumed_from is not None and ckpt.extra.get("seen", stop_at) == stop_at
    assert baseline.keys() == resumed.keys()
    for key in baseline:
        assert torch.equal(baseline[key], resumed[key]), key


def test_resume_leaves_no_mapping_of_the_checkpoint_behind(tmp_path: Path) -> None:
    """The resume reads state.pt memory-mapped (one copy less); nothing may keep the file
    mapped afterwards, or pruning it would fail on NFS and hold its disk space."""
    ctx = noderun.init(run_dir=tmp_path / "run", environ={})
    _train(ctx, None, 3)
    resumed, ckpt = _train(ctx, "auto", None)
    assert ckpt.resumed_from is not None and resumed
    maps = Path("/proc/self/maps").read_text()
    assert str(tmp_path) not in maps, [line for line in maps.splitlines() if str(tmp_path) in line]


def _model_run(tmp_path: Path) -> tuple[noderun.Context, Path]:
    ctx = noderun.init(run_dir=tmp_path / "run", environ={})
    _train(ctx, None, None, epochs=1)
    return ctx, tmp_path / "run" / "checkpoints" / "epoch-0001"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_bad_resume_inputs_name_the_file_and_change_nothing(tmp_path: Path) -> None:
    ctx, good = _model_run(tmp_path)
    partial = good.parent / "epoch-0002"
    partial.mkdir()
    (partial / "state.pt").write_bytes((good / "state.pt").read_bytes())
    corrupt = good.parent / "epoch-0003"
    checkpoint.save_state({"model": {}}, good.parent, "epoch-0003", keep=0)
    (corrupt / "state.pt").write_bytes(b"\x00not a zip at all")
    before = _snapshot(tmp_path)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))
    cases = {
        tmp_path / "missing": r"checkpoint \S*missing does not exist",
        partial: r"checkpoint \S*epoch-0002 is incomplete",
        corrupt: r"checkpoint file \S*epoch-0003/state\.pt is corrupt",
        good: r"checkpoint \S*epoch-0001/state\.pt does not fit this model: 0\.weight is "
        r"\[8, 5\] in the checkpoint but \[16, 5\] in the model",
    }
    for path, message in cases.items():
        ckpt = Checkpointer(ctx, model, torch.optim.AdamW(model.parameters()))
        with pytest.raises(UsageError, match=message) as err:
            ckpt.resume(path)
        assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert _snapshot(tmp_path) == before


def _commit(worker: checkpoint.CommitWorker, state: dict, directory: Path, tag: str):  # type: ignore[no-untyped-def,type-arg]
    return worker.submit(directory / tag, checkpoint.take_full(state, directory, tag))


def test_a_commit_runs_in_the_background_and_drain_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(checkpoint.PAUSE_ENV, "epoch-0001:0.5")
    worker = checkpoint.CommitWorker()
    future = _commit(worker, {"model": {"w": torch.ones(3)}}, tmp_path, "epoch-0001")
    assert checkpoint.latest(tmp_path) is None  # taken, not yet durable and marked
    assert [f.result() for _, f in worker.drain()] == [tmp_path / "epoch-0001"]
    assert future.result() == checkpoint.latest(tmp_path) == tmp_path / "epoch-0001"
    monkeypatch.setattr(checkpoint, "commit", lambda *a: (_ for _ in ()).throw(OSError("full")))
    failing = _commit(worker, {"model": {}}, tmp_path, "epoch-0002")
    with pytest.raises(OSError, match="full"):
        failing.result()  # a failed background commit surfaces in the training thread
    assert not checkpoint.temporary_dir(tmp_path, "epoch-0002").exists()  # its room given back


@pytest.mark.parametrize("big", [False, True])
def test_a_taken_state_is_the_state_of_the_call_whatever_changes_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, big: bool
) -> None:
    if big:  # serialized before take_full returns, not snapshotted
        monkeypatch.setattr(checkpoint, "SNAPSHOT_BYTES", 4)
    monkeypatch.setenv(checkpoint.PAUSE_ENV, "epoch-0001:0.2")
    weights = torch.ones(3)
    state = {"model": {"w": weights}, "optimizer": {"param_groups": [{"lr": 0.1}]}}
    worker = checkpoint.CommitWorker()
    future = _commit(worker, state, tmp_path, "epoch-0001")
    weights.add_(1)  # the next training step, in place
    state["optimizer"]["param_groups"][0]["lr"] = 0.2
    saved = checkpoint.read_full(future.result())
    assert torch.equal(saved["model"]["w"], torch.ones(3))
    assert saved["optimizer"]["param_groups"][0]["lr"] == 0.1


def test_a_commit_queued_behind_a_slow_one_lands_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(checkpoint.PAUSE_ENV, "epoch-0001:0.5")
    worker = checkpoint.CommitWorker()
    _commit(worker, {"model": {"w": torch.ones(1)}}, tmp_path, "epoch-0001")
    second = _commit(worker, {"model": {"w": torch.zeros(1)}}, tmp_path, "epoch-0002")
    assert checkpoint.latest(tmp_path) is None  # returned at once, nothing marked yet
    assert second.result() == tmp_path / "epoch-0002"
    assert checkpoint.checkpoints(tmp_path) == [tmp_path / "epoch-0001", tmp_path / "epoch-0002"]


def test_the_worker_holds_at_most_depth_commits(tmp_path: Path) -> None:
    worker = checkpoint.CommitWorker(depth=2)
    gate = threading.Event()
    order: list[str] = []

    def job(tag: str):  # type: ignore[no-untyped-def]
        def run() -> Path:
            gate.wait()
            order.append(tag)
            return tmp_path / tag

        return run

    worker.submit(tmp_path / "a", job("a"))
    worker.submit(tmp_path / "b", job("b"))
    third = threading.Thread(target=worker.submit, args=(tmp_path / "c", job("c")))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # no room: the training thread waits for the disk
    gate.set()
    third.join(10)
    assert [p.name for p, _ in worker.drain()] == ["a", "b", "c"] and order == ["a", "b", "c"]


def test_only_small_plain_cpu_state_is_serialized_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert checkpoint.small_on_cpu({"w": torch.ones(2), "n": 3, "t": (1, "a")})
    assert not checkpoint.small_on_cpu({"w": nn.Parameter(torch.ones(2))})
    assert not checkpoint.small_on_cpu({"f": lambda: 0})  # not plain data
    monkeypatch.setattr(checkpoint, "SNAPSHOT_BYTES", 8)
    assert checkpoint.small_on_cpu({"a": torch.ones(1), "b": torch.ones(1)})  # 8 bytes in all
    assert not checkpoint.small_on_cpu({"a": torch.ones(2), "b": torch.ones(1)})


@pytest.mark.parametrize("kind", [str, Path])
def test_public_functions_take_str_and_pathlike(tmp_path: Path, kind: type) -> None:
    directory = kind(tmp_path / "checkpoints")
    saved = public.save_state({"model": {"w": torch.ones(2)}}, directory, "epoch-0001")
    assert public.latest(directory) == saved
    assert public.checkpoints(directory) == [saved]
    assert public.is_complete(kind(saved))
    assert public.read_meta(kind(saved))["format"] == "full"
    assert torch.equal(public.load(kind(saved))["model"]["w"], torch.ones(2))
    assert public.resolve("auto", kind(tmp_path)) == saved
    assert public.resolve(kind(saved), kind(tmp_path)) == saved


def test_an_async_save_keeps_module_versions_and_shared_tensors(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    weights = model.state_dict()
    state = {"model": weights, "tied": [weights["0.weight"], weights["0.weight"]]}
    saved = checkpoint.read_full(checkpoint.save_state(state, tmp_path, "epoch-0001"))
    assert saved["model"]._metadata["1"]["version"] == 2  # BatchNorm's state_dict version
    assert (
        saved["tied"][0].data_ptr()
        == saved["tied"][1].data_ptr()
        == (saved["model"]["0.weight"].data_ptr())
    )
    model.load_state_dict(saved["model"])


def test_save_contract_rank0_save_state_and_deprecated_alias(tmp_path: Path) -> None:
    import warnings

    # save_state is the rank-0 writer: no warning, a complete checkpoint
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = public.save_state({"model": {"w": torch.tensor(1)}}, tmp_path, "epoch-0001")
    assert checkpoint.is_complete(path)
    # the old name still writes, but warns and names the new function
    with pytest.warns(DeprecationWarning, match=r"save_state"):
        old = public.save({"model": {"w": torch.tensor(2)}}, tmp_path, "epoch-0002")
    assert public.load(old)["model"]["w"].item() == 2
    # the public namespace's save_state is not the collective one, and the docs say which is which
    assert public.save_state is checkpoint.save_state
    assert not hasattr(public.Checkpointer.save, "__wrapped__")
    docs = (Path(__file__).parents[2] / "docs" / "checkpoints.md").read_text()
    assert "`noderun.checkpoint.save_state(state, directory, tag)` | **one rank only**" in docs
    assert "`Checkpointer.save(position, extra)` | **every rank, at the same point**" in docs
