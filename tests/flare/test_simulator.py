"""FLARE's simulator (SimEnv) running sites whose training is a noderun job."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, clean_env, processes_running

EXAMPLE = ROOT / "examples" / "flare" / "digits_fedavg.py"
SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


def _site_runs(workspace: Path) -> dict[str, dict[str, object]]:
    """Each site's noderun run.json, by site name."""
    runs = {}
    for run_json in workspace.rglob("runs/*/run.json"):
        runs[run_json.parent.name.rsplit("-", 2)[0]] = json.loads(run_json.read_text())
    return runs


def _sim_job(
    tmp_path: Path,
    script1: str,
    nodes1: int,
    script2: str,
    rounds: int = 2,
    *options: str,
    **env: str,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    workspace = tmp_path / "ws"
    try:
        result = subprocess.run(
            [
                sys.executable,
                str(SCRIPTS / "sim_job.py"),
                str(workspace),
                str(SCRIPTS / script1),
                str(nodes1),
                str(SCRIPTS / script2),
                str(rounds),
                *options,
            ],
            capture_output=True,
            text=True,
            timeout=280,
            cwd=tmp_path,
            env={**clean_env(), **env},
        )
    finally:
        left = processes_running(str(workspace))
        for proc in left:  # a hung simulation must not outlive the test
            proc.kill()
    assert not left, "a site or simulator process outlived the simulation"
    outlived = [line for line in result.stderr.splitlines() if line.startswith("OUTLIVED ")]
    assert not outlived, outlived  # sim_job.py: its descendants still running at the end
    return result, workspace / "sim"


def test_example_two_sites_three_rounds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--rounds", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=tmp_path,
        env=clean_env(NODERUN_FLARE_HEARTBEAT="0.3"),  # ranks 1-3 wait in renewed broadcasts
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not processes_running(str(out)), "a site process outlived the simulation"
    table = result.stdout.splitlines()[:3]
    assert table[1].split()[:6] == ["site-1", "local", "2", "x", "2", "4"]
    assert table[2].split()[:6] == ["site-2", "local", "1", "x", "1", "1"]
    for site, world in (("site-1", "4"), ("site-2", "1")):
        with (out / f"{site}.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert [r["round"] for r in rows] == ["0", "1", "2"]
        assert {r["world_size"] for r in rows} == {world}
    with (out / "global_accuracy.csv").open() as f:
        curve = [float(r["global_test_accuracy"]) for r in csv.DictReader(f)]
    assert len(curve) == 4 and curve[-1] > curve[0] + 0.5, curve
    summary = json.loads((out / "summary.json").read_text())
    assert summary["federated"] > max(summary["site-1_alone"], summary["site-2_alone"]), summary
    assert (out / "global_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = _site_runs(out / "workspace")
    assert set(runs) == {"site-1", "site-2"}
    for run in runs.values():  # every rank left by itself after the last round: no SIGTERM
        assert run["status"] == "completed" and run["exit_code"] == 0, run
    assert runs["site-1"]["topology"]["world_size"] == 4  # type: ignore[index]
    timings = next((out / "workspace").rglob("site-1-*/flare_rounds.json"))
    rounds = json.loads(timings.read_text())["rounds"]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    # rounds 1-2 wait for site-2 and the server for longer than 0.3 s: heartbeats happened
    assert sum(r["heartbeats"] for r in rounds) > 0, rounds


def test_plain_script_without_noderun_import(tmp_path: Path) -> None:
    result, workspace = _sim_job(tmp_path, "plain_ddp_site.py", 2, "plain_ddp_site.py")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = (workspace / "site-1" / "log.txt").read_text()
    assert "PLAIN round 0 world 2" in log and "PLAIN round 1 world 2" in log
    assert {r["status"] for r in _site_runs(workspace).values()} == {"completed"}


def test_failing_rank_fails_the_site_and_the_server_hears(tmp_path: Path) -> None:
    # the server hears of the bad result at once; the watchdog then ends what FLARE still waits for
    result, workspace = _sim_job(
        tmp_path, "failing_rank_site.py", 2, "plain_ddp_site.py", 3, NODERUN_FLARE_GRACE_SEC="5"
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "site-1: exit code 1: RuntimeError: rank 1 fails on purpose in round 1" in last, last
    server = (workspace / "server" / "log.txt").read_text()
    assert "Result from site-1 is bad" in server
    assert _site_runs(workspace)["site-1"]["status"] == "failed"


def test_flare_init_on_every_rank_is_one_line(tmp_path: Path) -> None:
    result, workspace = _sim_job(
        tmp_path, "every_rank_init.py", 2, "plain_ddp_site.py", NODERUN_FLARE_GRACE_SEC="3"
    )
    assert result.returncode == 1
    assert "FlareRankError: rank 1 called flare.init as rank 0" in result.stderr
    rank_log = next(workspace.rglob("site-1-*/logs/rank1.log")).read_text().strip().splitlines()
    assert len(rank_log) == 1 and rank_log[0].startswith("FlareRankError: rank 1 called"), rank_log
    assert "only global rank 0 may talk to FLARE" in rank_log[0]


def test_site_dying_before_its_first_task_fails_the_simulation(tmp_path: Path) -> None:
    # FLARE's simulator returns 0 for this run; the site's run.json tells the truth
    result, _ = _sim_job(
        tmp_path, "crash_at_start.py", 1, "plain_ddp_site.py", NODERUN_FLARE_GRACE_SEC="3"
    )
    assert result.returncode == 1, result.stdout[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert (
        "site-1: exit code 1: ModuleNotFoundError: No module named 'noderun_missing_module'" in last
    )


def test_task_kinds_train_submit_model_and_validate_reach_every_rank(tmp_path: Path) -> None:
    """Real FLARE: one FedAvg round, then cross-site evaluation (submit_model, validate)."""
    result, workspace = _sim_job(tmp_path, "task_kinds_site.py", 2, "task_kinds_site.py", 1, "cse")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    kinds: dict[str, list[list[object]]] = {}
    for path in workspace.rglob("runs/*/kinds-rank*.json"):
        kinds[f"{path.parent.name.rsplit('-', 2)[0]}/{path.name}"] = json.loads(path.read_text())
    # site-1 runs 2 ranks, site-2 one: every rank of a site saw the same kinds, in FLARE's order
    assert len(kinds) == 3, sorted(kinds)
    for site in ("site-1", "site-2"):
        ranks = [v for k, v in kinds.items() if k.startswith(site)]
        assert all(r == ranks[0] for r in ranks), kinds
        sequence = [kind for kind, _task, _number in ranks[0]]
        assert sequence[0] == "train" and "submit_model" in sequence, sequence
        assert sequence.count("validate") >= 2, sequence  # the global model and the others'
        assert sequence.index("submit_model") < len(sequence) - 1
    # the validate metrics (no weights) reached FLARE's cross-site results
    results = list(workspace.rglob("cross_val_results.json"))
    assert results, "FLARE wrote no cross-site evaluation results"
    table = json.loads(results[0].read_text())
    found = [m for per_site in table.values() for m in per_site.values() if m]
    assert found and all("val_loss" in m for m in found), table
    # each site evaluated the model it was sent (its data differs): its own model, the other
    # site's and the global one give three different losses on each site
    for per_site in table.values():
        assert len({m["val_loss"] for m in per_site.values()}) == 3, table
