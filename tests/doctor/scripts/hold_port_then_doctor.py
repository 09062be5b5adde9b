"""Inside an allocation: hold the job's rendezvous port (as a stale run would), then run the
doctor; it must name the port on the master. Used by test_doctor_run.py under salloc."""

import os
import socket
import subprocess
import sys

from noderun.topology import port_for_job

port = port_for_job(os.environ["SLURM_JOB_ID"])
with socket.socket() as holder:
    # as a stale server would; and an earlier job's TIME_WAIT on this port must not stop us
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("", port))
    holder.listen()
    done = subprocess.run([sys.executable, "-m", "noderun", "doctor", "--json", *sys.argv[1:]])
sys.exit(done.returncode)
