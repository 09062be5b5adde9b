"""Shared fixtures: the noderun command, a clean environment, leftover-process checks.

Under CI (``CI=true``) a test of the Slurm or SSH lanes that skips (no lab, no sshd, an extra
of the dev install missing) is reported as a failure: CI has every lab, so a skip there would
hide a lane that did not run."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil
import pytest

LAB_MARKERS = ("slurm", "ssh")


def under_ci() -> bool:
    """True where a missing lab is an error: the CI runner (``CI=true``, as most CI systems set)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without launcher variables (tests may run inside a SLURM job or torchrun)."""
    drop = (
        "SLURM_",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_",
        "TORCHELASTIC_",
        "NODERUN_",
        "OMPI_COMM_WORLD_",
    )
    # kept: how local agents start (NODERUN_NODE_TEMPLATE=0 runs the tests on the exec path)
    keep = ("NODERUN_NODE_TEMPLATE",)
    env = {k: v for k, v in os.environ.items() if k in keep or not k.startswith(drop)}
    env.update(extra)
    return env


def noderun(
    args: Sequence[str], timeout: float = 120, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "noderun", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=clean_env(**env),
    )


def cli(
    args: Sequence[str], cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The CLI called in this process, as ``noderun()`` runs it (same environment, working
    directory and exit code): for verbs that start nothing, where a subprocess only adds the
    interpreter's start (~0.5 s on these machines)."""
    from noderun.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    wanted = clean_env(**env)
    os.environ.clear()
    os.environ.update(wanted)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as done:  # argparse: --help, usage errors
                code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
                if isinstance(done.code, str):
                    err.write(done.code + "\n")
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["noderun", *args], code, out.getvalue(), err.getvalue())


def start_noderun(args: Sequence[str], **env: str) -> subprocess.Popen[str]:
    """Start the real CLI in the background; stdout and stderr together in ``stdout``."""
    return subprocess.Popen(
        [sys.executable, "-m", "noderun", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(**env),
    )


def follow_logs(*args: str) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    """`noderun logs -f ARGS` running, the list its lines arrive in, and the thread reading them
    (join it once the command ended: then the list is whole)."""
    follow = subprocess.Popen(
        [sys.executable, "-m", "noderun", "logs", "-f", *args],
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    followed: list[str] = []
    stdout = follow.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: followed.extend(stdout), daemon=True)
    reader.start()
    return follow, followed, reader


def run_args(script: Path, run_dir: Path, nnodes: int = 2, nproc: int = 2) -> list[str]:
    """``noderun run`` arguments for ``script`` on ``nnodes`` x ``nproc`` ranks into ``run_dir``."""
    return [
        "run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--run-dir",
        str(run_dir),
        str(script),
    ]


def processes_running(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line mentions ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def processes_of_run(run_dir: Path, marker: str) -> list[psutil.Process]:
    """The live processes of the run in ``run_dir`` whose command line mentions ``marker``: the
    lanes run the same examples side by side, so a shared script's path alone names other runs."""
    mine = []
    for proc in processes_running(marker):
        try:
            if proc.environ().get("NODERUN__RUN_DIR") == str(run_dir):
                mine.append(proc)
        except psutil.Error:
            continue
    return mine


def wait_until(condition: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds passed: a wait on the event
    itself where a fixed sleep would wait the whole time. True if it came."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


@pytest.fixture
def scripts() -> Path:
    return SCRIPTS


DEMO_TEST = "tests/examples/test_ddp_classifier.py::test_classifier_reaches_95_percent_and_verifies"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo of docs/launching.md, run once as written (the classifier on 2 x 2 ranks, its
    12 epochs, then ``noderun verify``): its run directory and output. test_ddp_classifier
    checks the run, test_summary the summary of it (exit 0 of both commands asserted)."""
    from tests.docs.test_snippets import run_snippet_of

    cwd = tmp_path_factory.mktemp("launching")
    result = run_snippet_of("docs/launching.md", DEMO_TEST, cwd)
    return cwd / "runs" / "local", result.stdout


@pytest.fixture(scope="session")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain torch DDP script (tests/explain/scenarios/plain_ddp.py: no noderun import)
    under ``noderun run`` on 2 x 1 ranks, rank 0 saving checkpoints/model.pt: what verify's
    and the summary's tests of a plain script read (they write nothing but the summary)."""
    run_dir = tmp_path_factory.mktemp("plain-run") / "plain"
    script = ROOT / "tests" / "explain" / "scenarios" / "plain_ddp.py"
    done = noderun(
        ["run", "--nnodes", "2", "--nproc-per-node", "1", "--run-dir", str(run_dir),
         str(script), "--out", str(run_dir), "--exit-hard"],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir


@pytest.fixture(scope="session")
def llm_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/llm's instruction JSONL, written by its prepare_data.py."""
    from tests.examples.llm_helpers import example

    out = tmp_path_factory.mktemp("llm_data") / "pydoc_instructions.jsonl"
    example("prepare_data").write(out)
    return out


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with SmolLM2's tokenizer, saved as a Hugging Face directory."""
    from tests.examples.llm_helpers import example

    return example("tiny_model").write(tmp_path_factory.mktemp("tiny_llm"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under CI, a skipped test of a lab lane is a failure (see the module's docstring)."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    lanes = [m for m in LAB_MARKERS if item.get_closest_marker(m)]
    if lanes:
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: the {'/'.join(lanes)} lane must run here, but it skipped: {why}"
        )


@pytest.fixture
def tiny_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 300 KiB tmpfs (a full disk on demand; root only), else skip."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


CPU_LOG = os.environ.get("NODERUN_TEST_CPU_LOG")  # make test-cpu: where each test's CPU went


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """With NODERUN_TEST_CPU_LOG set, append each test's CPU seconds (this process and every
    process it waited for: launchers, agents, ranks) and wall seconds to that file: the suite's
    budget is CPU on 2 cores, which --durations (wall, inflated by the other lanes) hides."""
    if not CPU_LOG:
        yield
        return
    import resource

    def cpu() -> float:
        own, kids = (
            resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    start_cpu, start_wall = cpu(), time.monotonic()
    yield
    with open(CPU_LOG, "a") as log:
        log.write(f"{cpu() - start_cpu:.1f}\t{time.monotonic() - start_wall:.1f}\t{item.nodeid}\n")


LIGHTNING_TEST = (
    "tests/examples/test_lightning_classifier.py::"
    "test_two_nodes_by_two_processes_train_and_log_into_the_run_dir"
)


@pytest.fixture(scope="session")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """docs/lightning.md's commands, run once as written (examples/lightning_classifier.py, a
    Lightning script with no noderun import, on 2 x 2 ranks for 4 epochs, then ``noderun
    verify``): its run directory and output. test_lightning_classifier checks the run,
    tests/verify/test_plain_scripts.py verify's report of it (they only read it)."""
    from tests.docs.test_snippets import run_snippet_of

    cwd = tmp_path_factory.mktemp("lightning-page")
    result = run_snippet_of("docs/lightning.md", LIGHTNING_TEST, cwd)
    return cwd / "runs" / "lightning", result.stdout
