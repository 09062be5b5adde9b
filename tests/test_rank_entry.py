"""The rank entry runs a script exactly as `python SCRIPT` would, then leaves with os._exit.

Each behaviour is compared with plain `python` running the same script in the same way."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.plan.launch import RANK_ENTRY

PROBE = """\
import atexit, json, os, sys, threading, time
from sibling import VALUE  # imported from the script's own folder
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.2)
    print("thread finished", flush=True)
threading.Thread(target=late).start()  # not a daemon: the interpreter waits for it
print(json.dumps({"argv": sys.argv, "file": __file__, "name": __name__,
                  "path0": sys.path[0], "value": VALUE, "main_is_me":
                  sys.modules["__main__"].__dict__ is globals()}), flush=True)
mode = os.environ.get("PROBE_MODE", "")
if mode == "raise":
    raise ValueError("boom")
if mode == "message":
    sys.exit("bad input")
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "sigterm":
    os.kill(os.getpid(), 15)
    time.sleep(5)
if mode.isdigit():
    sys.exit(int(mode))
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "sibling.py").write_text("VALUE = 42\n")
    (folder / "train.py").write_text(PROBE)
    return folder / "train.py"


def run(argv: list[str], cwd: Path, mode: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROBE_MODE": mode}
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def both(probe: Path, mode: str = "", args: tuple[str, ...] = ("--lr", "a b")) -> tuple:
    rel = os.path.relpath(probe, probe.parent.parent)
    plain = run([rel, *args], probe.parent.parent, mode)
    entry = run([RANK_ENTRY, rel, *args], probe.parent.parent, mode)
    return plain, entry


def test_argv_file_name_path_and_sibling_imports_are_the_scripts(probe: Path) -> None:
    plain, entry = both(probe)
    assert plain.returncode == entry.returncode == 0, entry.stderr
    assert entry.stdout == plain.stdout
    first = entry.stdout.splitlines()[0]
    assert '"argv": ["proj/train.py", "--lr", "a b"]' in first
    assert f'"file": "{probe}"' in first and '"name": "__main__"' in first
    assert f'"path0": "{probe.parent}"' in first and '"main_is_me": true' in first


def test_atexit_handlers_and_non_daemon_threads_run_before_leaving(probe: Path) -> None:
    _, entry = both(probe)
    assert entry.stdout.splitlines()[1:] == ["thread finished", "atexit ran"]


@pytest.mark.parametrize("code", ["0", "3", "2", "75"])
def test_sys_exit_code_is_the_exit_status(probe: Path, code: str) -> None:
    plain, entry = both(probe, code)
    assert entry.returncode == plain.returncode == int(code)
    assert "atexit ran" in entry.stdout


def test_sys_exit_with_a_message_prints_it_and_exits_1(probe: Path) -> None:
    plain, entry = both(probe, "message")
    assert entry.returncode == plain.returncode == 1
    assert entry.stderr == plain.stderr == "bad input\n"


def test_uncaught_exception_prints_the_same_traceback_and_exits_1(probe: Path) -> None:
    plain, entry = both(probe, "raise")
    assert entry.returncode == plain.returncode == 1
    assert entry.stderr == plain.stderr
    assert entry.stderr.startswith("Traceback (most recent call last):\n  File ")
    assert "rank_entry" not in entry.stderr and "ValueError: boom" in entry.stderr


def test_keyboard_interrupt_dies_of_sigint_like_python(probe: Path) -> None:
    plain, entry = both(probe, "interrupt")
    assert entry.returncode == plain.returncode == -signal.SIGINT
    assert "KeyboardInterrupt" in entry.stderr and "rank_entry" not in entry.stderr


def test_a_signal_kills_it_as_it_kills_python(probe: Path) -> None:
    plain, entry = both(probe, "sigterm")
    assert entry.returncode == plain.returncode == -signal.SIGTERM


def test_module_targets_run_as_python_dash_m(tmp_path: Path) -> None:
    plain = run(["-m", "json.tool", "--help"], tmp_path)
    entry = run([RANK_ENTRY, "-m", "json.tool", "--help"], tmp_path)
    assert entry.returncode == plain.returncode == 0
    assert entry.stdout == plain.stdout


def test_a_missing_script_is_exit_2_as_python_says(tmp_path: Path) -> None:
    entry = run([RANK_ENTRY, "nope.py"], tmp_path)
    assert entry.returncode == 2 and "can't open file 'nope.py'" in entry.stderr


def test_nothing_of_noderun_or_torch_is_imported_before_the_script(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                      "('noderun', 'torch')))\n")  # fmt: skip
    entry = run([RANK_ENTRY, str(script)], tmp_path)
    assert entry.stdout.strip() == "[]"


def test_no_python_execs_the_program_and_says_when_it_cannot(tmp_path: Path) -> None:
    done = run([RANK_ENTRY, "--no-python", "sh", "-c", 'echo "$0 $1"', "a b", "c"], tmp_path)
    assert (done.returncode, done.stdout) == (0, "a b c\n")
    missing = run([RANK_ENTRY, "--no-python", "./absent"], tmp_path)
    assert missing.returncode == 127 and "./absent: cannot execute" in missing.stderr


def test_a_missing_module_is_reported_as_python_m_does(tmp_path: Path) -> None:
    ours = run([RANK_ENTRY, "-m", "no_such_module_here"], tmp_path)
    theirs = run(["-m", "no_such_module_here"], tmp_path)
    assert ours.returncode == theirs.returncode == 1
    assert ours.stderr == theirs.stderr  # "<python>: No module named no_such_module_here"


def test_noderun_restart_counts_become_torchelastic_ones(tmp_path: Path) -> None:
    script = tmp_path / "count.py"
    script.write_text("import os; print(os.environ['TORCHELASTIC_RESTART_COUNT'])\n")
    env = {**os.environ, "NODERUN_RESTART_COUNT": "2", "NODERUN_MAX_RESTARTS": "3",
           "TORCHELASTIC_RESTART_COUNT": "0"}  # fmt: skip
    done = subprocess.run([sys.executable, RANK_ENTRY, str(script)], capture_output=True,
                          text=True, env=env, timeout=60)  # fmt: skip
    assert done.stdout == "2\n"


HALF_LINE = """\
import sys
stream = getattr(sys, sys.argv[1])
stream.write("half ")
sys.stdin.readline()  # the test looks at the pipe now: the half line must not be there yet
print("line", file=stream)
sys.stdin.readline()
"""


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_line_reaches_the_pipe_whole_even_under_pythonunbuffered(
    tmp_path: Path, stream: str
) -> None:
    """The launcher sets PYTHONUNBUFFERED=1; a tee reading between the text and its newline
    glued two ranks' lines together. Through the entry, text goes out with its line end."""
    script = tmp_path / "half.py"
    script.write_text(HALF_LINE)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, RANK_ENTRY, str(script), stream],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    out = proc.stdout if stream == "stdout" else proc.stderr
    assert out is not None
    try:
        ready, _, _ = select.select([out], [], [], 1.0)
        assert not ready, os.read(out.fileno(), 100)  # "half " alone was written
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        ready, _, _ = select.select([out], [], [], 10.0)
        assert ready
        assert os.read(out.fileno(), 100) == b"half line\n"  # one write: the whole line
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
