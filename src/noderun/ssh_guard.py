"""The far end of an SSH node: run the node's command, and end it when the connection ends.

``noderun run --hosts`` starts, on every host, ``python /…/noderun/ssh_guard.py -- ARGV…``
over SSH with its stdin a pipe that noderun keeps open. SSH gives a remote command no signal
when the connection drops (no tty), so the guard watches stdin: at EOF (noderun tore the job
down, was killed, or the network dropped) it sends SIGTERM to the command's whole process
group, and SIGKILL after ``NODERUN_SSH_GRACE`` seconds (default 3). Nothing outlives the
job on the host. The command's exit status is the guard's (a signal death as 128+N, as a
shell reports it). Started by path: standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_ENV = "NODERUN_SSH_GRACE"
ENV_STDIN = "--env-stdin"  # noderun/plan/ssh.py's flag: the ranks' variables come on stdin


def _stop(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        if child.poll() is not None and signum == signal.SIGTERM:
            # the leader is gone; its group may not be: one more SIGKILL for stragglers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            return


def _watch_stdin(child: subprocess.Popen[bytes], grace: float) -> None:
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    _stop(child, grace)


def _read_env_line() -> dict[str, str]:
    """The first line of stdin: the ranks' variables as a JSON object (sent by noderun over
    the connection, so no secret stands on a command line)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1)  # byte by byte: what follows the line is the EOF watch's
        if not chunk:
            break
        data += chunk
    env = json.loads(data or b"{}")
    if not isinstance(env, dict):
        raise ValueError("not a JSON object")
    return {str(k): str(v) for k, v in env.items()}


def main(argv: list[str]) -> int:
    env = None
    if argv[:1] == [ENV_STDIN]:
        argv = argv[1:]
        try:
            env = {**os.environ, **_read_env_line()}
        except ValueError as err:
            print(f"ssh_guard.py: cannot read the environment on stdin: {err}", file=sys.stderr)
            return 2
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: ssh_guard.py -- COMMAND [ARGS…]", file=sys.stderr)
        return 2
    grace = float((env or os.environ).get(GRACE_ENV, "3") or 3)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as err:
        print(f"{argv[0]}: cannot execute: {err.strerror}", file=sys.stderr)
        return 127
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: _stop(child, grace))
    threading.Thread(target=_watch_stdin, args=(child, grace), daemon=True).start()
    code = child.wait()
    # whatever the command left in its group (its leader is gone) goes with it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
