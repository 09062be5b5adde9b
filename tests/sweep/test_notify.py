"""--notify: the summary JSON on a command's stdin; a failing target is a warning only."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path

import pytest

from noderun import notify
from noderun.run_record import FailureRecord, RunRecord


def test_the_summary_names_the_event_status_failure_and_last_metrics(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("epoch,loss\n1,0.7\n")
    record = RunRecord(backend="slurm", status="preempted", job_id="7_1", exit_code=75)
    record.failure = FailureRecord(reason="rank 0 preempted", rank=0, exit_code=75)
    payload = notify.summary(tmp_path, record)
    assert payload["event"] == "preemption" and payload["job_id"] == "7_1"
    assert payload["failure"] == "rank 0 preempted" and payload["metrics"] == {
        "epoch": "1",
        "loss": "0.7",
    }
    events = {s: notify.summary(tmp_path, RunRecord(backend="local", status=s))["event"]
              for s in ("completed", "failed", "stalled")}  # fmt: skip
    assert events == {"completed": "end", "failed": "failure", "stalled": "stall"}


def test_a_command_reads_the_json_and_a_failing_one_is_a_warning(tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    warnings: list[str] = []
    failed = notify.send(
        [f"cat > {got}", "echo broken >&2; exit 3"], {"event": "end"}, warnings.append
    )
    assert json.loads(got.read_text()) == {"event": "end"}
    assert failed == 1 and len(warnings) == 1
    assert "exit 3: broken" in warnings[0] and "the run is unaffected" in warnings[0]


def test_an_apprise_url_without_the_extra_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "apprise", None)  # not installed
    warnings: list[str] = []
    assert notify.send(["ntfy://topic"], {"event": "end"}, warnings.append) == 1
    assert "pip install 'noderun[notify]'" in warnings[0]


def test_an_apprise_url_goes_through_apprise(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, str]] = []

    class Apprise:
        def add(self, url: str) -> bool:
            return url.startswith("ntfy://")

        def notify(self, title: str, body: str) -> bool:
            sent.append({"title": title, "body": body})
            return True

    monkeypatch.setitem(sys.modules, "apprise", types.SimpleNamespace(Apprise=Apprise))
    assert notify.send(["ntfy://topic"], {"event": "failure", "run_dir": "/r"}, print) == 0
    assert sent[0]["title"] == "noderun: failure: /r"
    assert json.loads(sent[0]["body"])["event"] == "failure"
    assert notify.send(["bogus://x"], {"event": "end"}, lambda line: None) == 1


def test_a_requeue_tells_the_targets_the_launcher_exported(tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    environ: dict[str, str] = {"NODERUN__RUN_DIR": str(tmp_path), "SLURM_RESTART_COUNT": "0"}
    notify.export_targets([f"cat > {got}"], environ)
    notify.notify_requeued("63_2", environ)
    payload = json.loads(got.read_text())
    assert payload["event"] == "preemption" and payload["status"] == "requeued"
    assert payload["job_id"] == "63_2" and payload["run_dir"] == str(tmp_path)
    notify.notify_requeued("1", {})  # no targets exported: nothing to do


def test_a_stall_the_job_waits_through_is_sent_from_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noderun.backends import stall
    from tests.conftest import wait_until

    got = tmp_path / "got.json"
    assert notify.notify_stall(tmp_path, "r", None, {}) is None  # nothing exported
    watcher = stall.StallWatcher(
        stall.StallPolicy(5.0, stall.OnStall.REPORT), tmp_path, 2, job_id="9",
        console=io.StringIO(),
    )  # fmt: skip

    def no_ranks() -> stall.Snapshot:
        raise RuntimeError("no ranks here")

    monkeypatch.setattr(watcher, "take", no_ranks)
    monkeypatch.setattr(stall.os, "environ", {notify.TARGETS_ENV: json.dumps([f"cat > {got}"])})
    watcher._fire(12.0)
    assert wait_until(lambda: got.exists() and got.read_text().endswith("}\n"), timeout=10)
    payload = json.loads(got.read_text())
    assert payload["event"] == "stall" and payload["status"] == "running"
    assert payload["job_id"] == "9" and "report" in payload["stall"] and not watcher.killed


def test_a_real_apprise_url_delivers_the_summary_to_a_local_http_server() -> None:
    """apprise itself (the `notify` extra), no stand-in: its ``json://`` target POSTs the title
    and body to a server here; a server that answers 500 is a warning, the run unaffected."""
    apprise = pytest.importorskip("apprise")
    import http.server
    import threading

    posted: list[dict[str, str]] = []
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"json://127.0.0.1:{server.server_address[1]}/hook"
    try:
        assert apprise.Apprise().add(url)
        warnings: list[str] = []
        assert notify.send([url], {"event": "failure", "run_dir": "/r"}, warnings.append) == 0
        assert posted[0]["title"] == "noderun: failure: /r", posted
        assert json.loads(posted[0]["message"])["event"] == "failure"
        status[0] = 500
        assert notify.send([url], {"event": "end", "run_dir": "/r"}, warnings.append) == 1
        assert "apprise could not deliver it" in warnings[0] and len(posted) == 2
    finally:
        server.shutdown()
