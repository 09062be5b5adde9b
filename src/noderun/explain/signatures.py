"""The knowledge of ``noderun explain``: one table of failure signatures, easy to extend.

A signature is a regular expression (RE2 syntax, also valid for Python's ``re``) matched
against one log line, the cause id it indicates, a one-line summary and a one-line fix.
Order matters: a line is attributed to the first signature that matches it, so specific
patterns come before general ones. ``tier`` ranks causes against each other:

- ``ROOT``: an error that is a cause in its own right;
- ``CONSEQUENCE``: what other ranks report *because* one failed (peer closed the connection,
  the launcher stopping the gang); evidence, but never the root cause when a ROOT one exists;
- ``WEAK``: a message that is often benign (retries, warnings) and only a cause when nothing
  stronger is found;
- ``LAST_RESORT``: generic error words, reported as ``unknown`` only when nothing else matched;
- ``WARNING``: a warning, reported as one and never as a failure;
- ``SIGN``: not a problem but a sign of health (the run finished, every rank registered, the
  NCCL version a node runs): what explain saw, and what refutes or confirms other findings.

``refuted_by`` names a sign that makes a finding moot (Lightning's ``MEMBER: 1/4`` is no
evidence of a missing launcher once every rank registered); ``run_failed`` marks a launcher's
report that the run failed, which no sign of a finished run can outweigh.
"""

from __future__ import annotations

import dataclasses
import enum


class Tier(enum.IntEnum):
    ROOT = 0
    CONSEQUENCE = 1  # a crash seen only through its consequences still outranks a warning
    WEAK = 2
    LAST_RESORT = 3
    WARNING = 4
    SIGN = 5


CAUSES: dict[str, str] = {
    "missing-launcher": "ranks started without srun/torchrun: all claim rank 0, or 1/N joined",
    "device-ordinal": "global rank used as device index: invalid device ordinal",
    "port-in-use": "the rendezvous port is already taken",
    "network-unreachable": "no route to the peer: wrong network interface or firewall",
    "connection-refused": "nobody listens at the master address: master not up, or wrong address",
    "rendezvous-timeout": "some ranks or nodes never joined the rendezvous",
    "collective-timeout": "a collective timed out: ranks desynchronized or one is stuck or dead",
    "stalled-rank": "no progress: a rank is stuck outside the collective the others wait in",
    "collective-deadlock": "ranks call different collectives, so none completes",
    "rank-crashed": "a worker died: exception, exit code or signal",
    "out-of-memory": "GPU or host memory exhausted, or the OOM killer struck",
    "fl-client-conflict": "several FL clients for one site, or flare.init timed out",
    "storage-missing": "a file or checkpoint is missing on (some) nodes",
    "version-mismatch": "python/torch/CUDA/NCCL versions differ between nodes or builds",
    "finalization-abort": "a rank aborted after its work ended (at interpreter exit, teardown)",
    "ssh-unreachable": "the launcher cannot ssh into another node (keys, sshd, host name)",
    "shm-exhausted": "/dev/shm has no room for shared-memory segments (data workers, NCCL)",
    "disk-full": "a filesystem the job writes to is full or over its quota",
    "duplicate-gpu": "two ranks on one node use the same GPU",
    "link-fault": "a network link (InfiniBand/RoCE port) is failing",
    "time-limit": "SLURM ended the job at its time limit",
    "interrupted": "the run was stopped from outside (Ctrl-C, a signal to the launcher)",
    "cancelled": "the run was cancelled by `noderun cancel`",
    "node-failure": "SLURM lost a node of the job (node failure)",
    "preempted": "SLURM preempted the job for a higher-priority one",
    "gpu-fault": "a GPU failed in hardware (uncorrectable ECC error, fell off the bus, Xid)",
    "nccl-config": "an NCCL_* setting (environment, /etc/nccl.conf) does not fit these nodes",
    "nccl-version-bug": "NCCL hit an internal error: a bug of that NCCL version or setup",
    "gpu-unavailable": "the process sees no usable GPU (none allocated or visible, or all busy)",
    "memlock-limit": "the locked-memory limit (ulimit -l) is too low for RDMA to register memory",
    "resource-request": "SLURM refused the request (partition, GPUs/GRES, nodes, time limit)",
    "download-failed": "a rank could not download a model/data file it has no cached copy of",
    "unknown": "a failure with no known signature",
}
# warnings (Tier.WARNING): reported as warnings, never as the cause of a failure
WARNINGS: dict[str, str] = {
    "nccl-warning": "NCCL warned (often benign: an optional library or transport is absent)",
    "warning": "a library warned about something that failed, and went on",
    "retried": "a program caught a failure, said it retries (or tries a smaller size), and went on",
    "thread-exception": "a background thread's exception was printed; the process went on",
}
# signs of health (Tier.SIGN): what they show
SIGNS: dict[str, str] = {
    "finished": "the run finished",
    "registered": "every rank joined the process group",
    "nccl-version": "the NCCL version a node runs",
    "nccl-file": "NCCL read its graph (channels) from a file named in NCCL_GRAPH_FILE",
    "backend": "the process group backend",
    "member": "a rank other than 0 announced itself (Lightning's GLOBAL_RANK/MEMBER line)",
    "requeued": "SLURM requeued the job (preempted, to run again): its step was cancelled for it",
}


@dataclasses.dataclass(frozen=True)
class Signature:
    cause: str
    pattern: str
    summary: str
    fix: str
    tier: Tier = Tier.ROOT
    refuted_by: str = ""  # a SIGNS key: when seen anywhere, this finding is moot
    run_failed: bool = False  # a launcher reporting that the run failed
    # the process that printed it was taken down by it: no sign of finished work outweighs it
    # (unlike run_failed, it does not rank the line after a rank's own words)
    ends_run: bool = False
    # says only that something failed (an exception's type, an exit code): within the same
    # second a line of the same tier that says why is the better evidence (findings.Ranker)
    generic: bool = False
    # evidence of a cause only when no other failure was found (a step's reason-less
    # CANCELLED line is also what srun prints when it stops a step after a task failed)
    alone: bool = False

    def __post_init__(self) -> None:
        known = {Tier.SIGN: SIGNS, Tier.WARNING: WARNINGS}.get(self.tier, CAUSES)
        if self.cause not in known:
            raise ValueError(f"unknown cause id {self.cause!r}; add it to CAUSES or SIGNS")
        if self.refuted_by and self.refuted_by not in SIGNS:
            raise ValueError(f"unknown sign {self.refuted_by!r}")


_SRUN_FIX = "start every rank with `srun python SCRIPT …` (or `noderun run`), not python alone"
_PORT_FIX = (
    "pick a free port (--master-port / MASTER_PORT) or stop the process holding it; in srun "
    "mode noderun itself serves MASTER_PORT, so a script that starts its own store there needs "
    "NODERUN_AGENT_STORE=0"
)
_REFUSED_FIX = "check MASTER_ADDR is the first node of the job and that rank 0 started first"
_IFACE_FIX = (
    "set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the interface that routes between nodes "
    "(`noderun doctor` names it); check the firewall"
)
_RDZV_FIX = (
    "start every node (check srun/torchrun ran on all of them) with the same MASTER_ADDR, "
    "MASTER_PORT and world size"
)
_OOM_FIX = "lower the batch size or model size per rank, or ask for more memory (--mem)"
_SSH_FIX = (
    "make passwordless ssh work from the launching node to every other (keys, sshd, the host "
    "names in the hostfile), or start one launcher per node with srun instead of over ssh"
)
_SHM_FIX = (
    "give /dev/shm more room (docker --shm-size / --ipc=host, a larger tmpfs), or use fewer "
    "DataLoader workers"
)
_CRASH_FIX = "read the first failing rank's traceback above; the other ranks only lost their peer"
_CANCEL_FIX = (
    "find who cancelled it (`sacct -j ID -o State` says CANCELLED by UID); start srun from "
    "sbatch (or tmux/nohup), not from a session that may close; resume from a checkpoint"
)
_ABORT_FIX = (
    "the work finished; torch 2.13's gloo backend aborts in interpreter teardown (pytorch/pytorch "
    "PR 179291): run under `noderun run`/`noderun submit`, whose rank entry exits before that "
    "teardown, or upgrade torch"
)

SIGNATURES: tuple[Signature, ...] = (
    # benign lines that carry error words; first, so that no cause claims them.
    # slurmstepd (src/slurmd/slurmstepd/mgr.c) when --chdir/the cwd is missing on a node: the
    # step still runs, in /tmp
    Signature(
        "warning",
        r"slurmstepd: error: couldn't chdir to .*going to /tmp instead",
        "slurmstepd could not enter the working directory on a node and ran the step in /tmp",
        "create the directory on every node (or submit from a shared one) if the job needs it",
        Tier.WARNING,
    ),
    # Slurm's error-level lines that a running job survives: jobacct_gather reading a process
    # that just ended (_is_a_lwp, "usually harmless" in HPC centres' docs), srun without a tty
    # (ioctl TIOCGWINSZ, --pty), slurmstepd falling back from a TMPDIR it cannot create, the
    # x11 spank plugin on a node without X
    Signature(
        "warning",
        r"error: _is_a_lwp: open\(\) /proc/\d+/status failed|"
        r"srun: error: ioctl\(TIOCGWINSZ\)|Not using a pseudo-terminal, disregarding --pty|"
        r"slurmstepd: error: (Unable to create TMPDIR|Setting TMPDIR to)|"
        r"spank: x11\.so: Plugin x11 failed to initialize",
        "Slurm logged an error that the job survives (accounting, tty, TMPDIR, x11 noise)",
        "nothing to do if the job ran",
        Tier.WARNING,
    ),
    # torch's ProcessGroupGloo (createDefaultDevice) when the hostname resolves to no usable
    # address: it binds loopback, which works on one node and on no other (verdict: a Gloo
    # connect to a loopback peer names this as its reason)
    Signature(
        "warning",
        r"Unable to resolve hostname to a \(local\) address\. Using the loopback",
        "Gloo bound to the loopback address: this node's hostname resolves to no usable address",
        "set GLOO_SOCKET_IFNAME to the interface between the nodes (fine on a single node)",
        Tier.WARNING,
    ),
    # Python (Modules/atexitmodule.c) reports an atexit callback that raised and exits anyway
    Signature(
        "warning",
        r"^Error in atexit\._run_exitfuncs:",
        "an exit handler raised while the process ended (it still exited as it would have)",
        "nothing to do for the run; the traceback below names the handler",
        Tier.WARNING,
    ),
    # PMIx's shared-memory store (src/mca/gds/ds12/gds_ds12_lock_pthread.c) logs its lock's
    # init/finalize failing with PMIX_ERROR_LOG; srun --mpi=pmix and mpirun jobs run on
    # (openpmix#1716, open-mpi/ompi#7516)
    Signature(
        "warning",
        r"PMIX ERROR: ERROR in file \S*gds_ds12_lock_pthread\.c at line \d+",
        "PMIx could not set up or tear down its shared-memory store lock (harmless noise)",
        "nothing to do if the job ran; a newer PMIx/Open MPI no longer prints it",
        Tier.WARNING,
    ),
    # rdma-core (libibverbs/dynamic_driver.c) on every node without some vendor's NIC: it tries
    # each provider it knows and says so for the missing ones; the job runs on
    Signature(
        "warning",
        r"libibverbs: Warning: couldn't load driver",
        "libibverbs could not load a NIC provider library this node has no NIC for (harmless)",
        "nothing to do; install only the rdma-core providers the nodes' NICs need to silence it",
        Tier.WARNING,
    ),
    # c10d's store client (socket.cpp) tries every address of the master in turn and warns for
    # each it cannot use: an IPv6 or other-family address this host cannot reach fails at
    # once with EINVAL, EAFNOSUPPORT or EADDRNOTAVAIL, and the next address connects
    Signature(
        "warning",
        r"\[W.*client socket has failed to connect to .*\(errno: (22|97|99) - ",
        "c10d tried an address of the master this host cannot use (IPv6) and went on to the next",
        "nothing to do when the run went on; set MASTER_ADDR to an IPv4 address to silence it",
        Tier.WARNING,
    ),
    # Python's warnings ("file.py:N: UserWarning: …"), wandb's own errors (its system monitor,
    # uploads: a failure of wandb that ends a run raises in the rank's traceback), glibc's
    # dynamic loader skipping an LD_PRELOAD library, git run outside a repository: none stops
    # the process that prints them
    Signature(
        "warning",
        r"(^|\.py:\d+: )[A-Z]\w*Warning: |^wandb: ERROR |"
        r"^ERROR: ld\.so: object .* cannot be preloaded .*: ignored|"
        r"^fatal: not a git repository",
        "a library or tool warned and went on",
        "nothing to do if the run went on",
        Tier.WARNING,
    ),
    # c10d's server socket (socket.cpp SocketListenOp) tries the wildcard addresses in turn: a
    # host without IPv6 fails on [::] with EAFNOSUPPORT or EADDRNOTAVAIL and binds 0.0.0.0
    Signature(
        "warning",
        r"\[W.*server socket has failed to bind to \[::\]:\d+ \(errno: (97|99) - ",
        "c10d could not listen on IPv6 (the host has none) and went on with IPv4",
        "nothing to do when the run went on",
        Tier.WARNING,
    ),
    # missing launcher: one process where N were meant, or several all thinking they are rank 0
    Signature(
        "missing-launcher",
        r"python started without srun",
        "python ran once in the batch script instead of once per task",
        _SRUN_FIX,
    ),
    Signature(
        "missing-launcher",
        r"(waiting for clients\.\s*|^\s*)1/([2-9]|\d\d+) clients joined",
        "only rank 0 ever joined: the other ranks were never started",
        _SRUN_FIX,
    ),
    Signature(
        "missing-launcher",
        r"[Cc]laim(s|ed)? rank 0|all ranks are 0|GLOBAL_RANK: 0, MEMBER: 1/([2-9]|\d\d+)",
        "several processes believe they are rank 0 (launcher missing)",
        _SRUN_FIX,
        Tier.WEAK,
        refuted_by="registered",
    ),
    # torch's env:// rendezvous (distributed/rendezvous.py _env_error) reads RANK, WORLD_SIZE,
    # MASTER_ADDR, MASTER_PORT that a launcher (torchrun, srun via a wrapper) sets: a script
    # started with python alone has none of them
    Signature(
        "missing-launcher",
        r"env:// rendezvous: environment variable \w+ expected, but not set",
        "the script was started without a launcher: torch's env:// rendezvous found no "
        "RANK/WORLD_SIZE/MASTER_ADDR in the environment",
        "start it with a launcher that sets them (torchrun / python -m torch.distributed.run, "
        "srun with `noderun run`), not with python alone",
    ),
    # Lightning's SLURM environment: several nodes asked for, but the processes not started by srun
    Signature(
        "missing-launcher",
        r"running multi-node training without SLURM handling the processes",
        "the job asks for several nodes but its processes were not started by srun",
        _SRUN_FIX,
        Tier.WEAK,
        refuted_by="registered",
    ),
    # NCCL's bootstrap root (src/bootstrap.cc) got the same rank from two processes: ranks were
    # numbered twice (a launcher started once per task, or one node rank on two nodes)
    Signature(
        "missing-launcher",
        r"Bootstrap Root : rank \d+ of \d+ ranks has already checked in",
        "two processes joined NCCL with the same rank: ranks were numbered twice",
        "start one process per rank with distinct ranks: srun with --ntasks-per-node = processes "
        "per node (or one torchrun per node, --ntasks-per-node=1), and a distinct node rank per "
        "node",
    ),
    Signature(
        "device-ordinal",
        r"invalid device ordinal|[Yy]our machine only has:? \[",
        "a rank selected a GPU index that does not exist on its node",
        "use LOCAL_RANK (not RANK) as the device index: torch.cuda.set_device(local_rank); ask "
        "for as many GPUs per node as ranks per node",
    ),
    # NCCL init (src/init.cc): two ranks of one communicator on the same device
    Signature(
        "duplicate-gpu",
        # (NCCL >= 2.26 words it "Multiple Ranks are using the same GPU/Partition")
        r"Duplicate GPU detected|Multiple Ranks are using the same GPU",
        "two ranks on one node selected the same GPU; NCCL refuses (invalid usage)",
        "set each rank's device from LOCAL_RANK (torch.cuda.set_device(local_rank)); check that "
        "CUDA_VISIBLE_DEVICES does not hide the other GPUs from the ranks, and that srun starts "
        "one torchrun per node (--ntasks-per-node=1), not one per GPU",
    ),
    # CUDA's cudaErrorECCUncorrectable / CUDA_ERROR_ECC_UNCORRECTABLE (214), the kernel
    # driver's Xid reports (NVRM: Xid 48 double-bit ECC, 79 fallen off the bus)
    Signature(
        "gpu-fault",
        r"ECC_UNCORRECTABLE|uncorrectable ECC error|cudaErrorECCUncorrectable|"
        r"NVRM: Xid \(.*\): (48|61|62|63|64|74|79|92|94|95|119|120|140)\b|fallen off the bus|"
        # CUDA's cudaErrorNvlinkUncorrectable; the driver failing to bring a GPU up
        r"uncorrectable NVLink error|RmInitAdapter failed|"
        r"Unable to determine the device handle for GPU.*GPU is lost",
        "a GPU reported a hardware fault (uncorrectable ECC error or lost from the bus)",
        "drain the node and have the GPU checked (nvidia-smi -q -d ECC, dmesg for Xid); "
        "resubmit excluding it (--exclude=NODE); resume from the last checkpoint",
    ),
    # NCCL (src/graph/xml.cc, search.cc): a graph file (NCCL_GRAPH_FILE) names GPUs/NICs that
    # this node does not have; the file's "set by environment" line is the better evidence
    Signature(
        "nccl-config",
        r"XML Import Channel : dev \d+ not found|XML Import Channel : net \d+ not found|"
        r"Could not open XML (topology|graph) file",
        "NCCL's graph file names devices this node does not have",
        "unset NCCL_GRAPH_FILE (and NCCL_TOPO_FILE) unless written for exactly these nodes; "
        "look for it in the environment, the container image and /etc/nccl.conf",
    ),
    # a config-based NCCL tuner plugin found installed (an image, gIB) with no config: NCCL
    # init fails with ncclInternalError, this its "Last error:"
    # NCCL's own checks of a setup that cannot work as configured (net_ib, init.cc, net.cc,
    # mnnvl.cc, nvls.cc): NICs of different link layers, nodes with different NIC counts, a
    # NET plugin (NCCL_NET) that is not there, MNNVL/NVLS the fabric (IMEX, fabric manager)
    # does not support, an unparsable NCCL_COMM_ID, transports all disabled
    Signature(
        "nccl-config",
        r"NET/IB ?: (Attempted to connect incompatible devices|Remote \S+ device is incompatible "
        r"with the local)|Detected mixed local (Coll)?Net device counts across ranks|"
        r"Failed to initialize any NET plugin|MNNVL \(cliqueSize \d+\) is available but not "
        r"working|Failed to bind NVLink SHARP \(NVLS\) Multicast memory|Invalid NCCL_COMM_ID|"
        r"Rank \d+ has no transport for \S+ peer \d+",
        "NCCL found its configuration does not fit these nodes (NICs, NET plugin, NVLink "
        "fabric, NCCL_COMM_ID or disabled transports)",
        "read the NCCL WARN: select NICs of one kind (NCCL_IB_HCA), give nodes the same NICs or "
        "set what the WARN names (NCCL_IGNORE_NET_MISMATCH, NCCL_MNNVL_ENABLE=0, "
        "NCCL_NVLS_ENABLE=0); check NCCL_* settings in the environment, image and /etc/nccl.conf",
    ),
    # CUDA's cudaErrorPeerAccessUnsupported / cudaErrorTooManyPeers met by NCCL's P2P transport
    # (CUDACHECK's WARN, or torch's "Last error:"): these GPUs cannot map each other's memory
    # (a VM or container without P2P, PCIe ACS/IOMMU on), NCCL's default P2P does not fit
    Signature(
        "nccl-config",
        r"peer access is not supported between these two devices|"
        r"cudaErrorPeerAccessUnsupported|peer mapping resources exhausted",
        "NCCL's peer-to-peer transport cannot map GPU memory between these GPUs (P2P is not "
        "supported here: a VM/container, PCIe ACS or the IOMMU)",
        "set NCCL_P2P_DISABLE=1 (NCCL then goes through host shared memory), or have the "
        "node's PCIe ACS/IOMMU settings fixed; `nvidia-smi topo -p2p r` shows what is allowed",
    ),
    Signature(
        "nccl-config",
        r"No NCCL_TUNER_CONFIG_PATH provided",
        "an NCCL tuner plugin is installed without its configuration",
        "set NCCL_TUNER_CONFIG_PATH to the plugin's config, or do not load that tuner plugin "
        "(NCCL_TUNER_PLUGIN); check what the image or the node sets in NCCL_* variables",
    ),
    # c10d's server socket binding an address that is not this host's (EADDRNOTAVAIL, errno 99;
    # libuv's TCPStore says "code: -99, name: EADDRNOTAVAIL"): the store is served where
    # MASTER_ADDR points, and that is not this node (rank 0, node rank 0 started elsewhere)
    Signature(
        "connection-refused",
        r"failed to bind to (\[[^\]]*[^:\]]\]|[0-9.]*[1-9][0-9.]*|[A-Za-z][\w.-]*):\d+ "
        r"\(errno: 99 - |code: -99, name: EADDRNOTAVAIL",
        "the rendezvous store could not listen on MASTER_ADDR: that address is not one of this "
        "node's (rank 0 / node rank 0 runs on another node than MASTER_ADDR names)",
        "set MASTER_ADDR to the node that runs rank 0 (node rank 0), e.g. the first host of "
        "`scontrol show hostnames`, and give node rank 0 to that node",
    ),
    # the CUDA runtime finds no device (cudaErrorNoDevice: nothing allocated, CUDA_VISIBLE_DEVICES
    # empty or naming a GPU this node lacks, a container without GPUs) or none it may use
    # (cudaErrorDevicesUnavailable: exclusive-process GPUs held by another process)
    Signature(
        "gpu-unavailable",
        r"No CUDA GPUs are available|no CUDA-capable device is detected|cudaErrorNoDevice|"
        r"CUDA_ERROR_NO_DEVICE|CUDA-capable device(s|\(s\))? (is/are|are|is) busy or "
        r"unavailable|cudaErrorDevicesUnavailable|"
        # nvidia-smi (NVML_ERROR_DRIVER_NOT_LOADED, or no device in the job's cgroup): the node
        # or the job has no GPU to give
        r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver|"
        r"^No devices were found\s*$|"
        # torch on a node without a GPU or driver: cuda/__init__.py _check_driver, c10's device
        # count on cudaErrorInitializationError, ProcessGroupNCCL's constructor
        r"Found no NVIDIA driver on your system|"
        r"CUDA driver initialization failed, you might not have a CUDA gpu|"
        r"ProcessGroupNCCL is only supported with GPUs, no GPUs found|"
        # cudaErrorSystemNotReady: an NVSwitch system whose fabric manager is not running
        r"CUDA error: system not yet initialized|cudaErrorSystemNotReady",
        "the process sees no GPU it can use: none allocated to it, CUDA_VISIBLE_DEVICES hides "
        "them, or they are held by other processes (exclusive compute mode)",
        "ask the scheduler for GPUs (--gres=gpu:N / --gpus-per-node), do not set "
        "CUDA_VISIBLE_DEVICES to ids this node lacks (or to the global rank), run containers "
        "with GPUs; `nvidia-smi` on the node says which are there and who holds them",
    ),
    # RDMA memory registration (NCCL's ibvwrap.cc: "Call to ibv_reg_mr[_iova2] failed with
    # error Cannot allocate memory"; older NCCL without the errno) and queue/completion queue
    # creation fail with ENOMEM when RLIMIT_MEMLOCK is low: NCCL's troubleshooting guide
    # ("remove the user limits on registering pinned memory") -- not the host out of memory
    Signature(
        "memlock-limit",
        r"Call to ibv_(reg_mr\w*|create_qp|create_cq) failed( with error Cannot allocate "
        r"memory)?\s*$|ibv_(reg_mr|create_qp|create_cq)\w* failed.*Cannot allocate memory|"
        r"(fi_mr_reg|ibv_reg_mr).*failed.*(-12|ENOMEM)\b",
        "RDMA could not pin (register) memory: the locked-memory limit (ulimit -l) is too low",
        "raise the memlock limit to unlimited where the ranks run: `ulimit -l` inside the job "
        "(Slurm propagates the submitting shell's: PropagateResourceLimits), `* soft/hard memlock "
        "unlimited` in /etc/security/limits.conf, docker --ulimit memlock=-1",
    ),
    # torch.distributed used before init_process_group (distributed_c10d._get_default_group):
    # a script that initialises only when a launcher set RANK/WORLD_SIZE/LOCAL_RANK was started
    # with python alone, or one rank's code path skipped the init
    Signature(
        "missing-launcher",
        r"Default process group has not been initialized, please make sure to call "
        r"init_process_group",
        "torch.distributed was used before init_process_group: the script was started without a "
        "launcher (it initialises only when RANK/WORLD_SIZE/LOCAL_RANK are set) or skipped the "
        "init",
        "start it with torchrun / srun (`noderun run`) so RANK, WORLD_SIZE and LOCAL_RANK are "
        "set; for one process, do not wrap the model in DDP/SyncBatchNorm",
    ),
    # only when nothing error-level came before it in its log (see findings.Ranker)
    Signature(
        "finalization-abort",
        r"terminate called without an active exception|free\(\): invalid pointer|"
        r"double free or corruption|munmap_chunk\(\): invalid pointer|"
        r"corrupted size vs\. prev_size|"
        # CUDA's cudaErrorCudartUnloading: a CUDA call (ProcessGroupNCCL's watchdog, a
        # destructor) after the runtime was unloaded at process exit
        r"CUDA error: driver shutting down|cudaErrorCudartUnloading",
        "a rank aborted (SIGABRT) in native code with no error before it: in interpreter "
        "teardown when its work had ended",
        _ABORT_FIX,
    ),
    # Ray's memory monitor (src/ray/raylet: the worker-killing policy) kills the newest task's
    # worker when the node's memory passes its threshold (RAY_memory_usage_threshold, 0.95),
    # before the kernel's OOM killer would: "Task was killed due to the node running low on
    # memory." (Ray >= 2.55: "N worker(s) were killed …"), then "Memory on the node (IP: …) …
    # which exceeds the memory usage threshold of 0.95"; the GCS logs the worker's exit type
    # NODE_OUT_OF_MEMORY. A ray.get of that task raises ray.exceptions.OutOfMemoryError. The
    # raylet (node_manager.cc) also sums up each period's kills on the driver's console: "N
    # Workers (tasks / actors) killed due to memory pressure (OOM), M Workers crashed due to
    # other reasons at node (ID: …)" (N > 0: the same kills; N = 0 says nothing of memory)
    Signature(
        "out-of-memory",
        r"(Task was|\d+ worker\(s\) were) killed due to the node running low on memory|"
        r"which exceeds the memory usage threshold of \d|"
        r"[Ee]xit[ _]type[:=]? ?=? ?NODE_OUT_OF_MEMORY|"
        r"\b[1-9]\d* Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)",
        "Ray's memory monitor killed a worker: the node's host memory passed Ray's threshold",
        "hold less in host memory per worker (fewer actors or tasks per node, smaller batches or "
        "buffers, offloading less to CPU), or spread the work over more nodes; "
        "RAY_memory_usage_threshold only moves the point where the kernel's OOM killer strikes",
    ),
    Signature(
        "out-of-memory",
        r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|\bMemoryError\b|"
        r"Cannot allocate memory|"
        r"std::bad_alloc|oom[-_]kill|OOM[ -]?[Kk]illed|"
        # the kernel's OOM killer (mm/oom_kill.c): "Out of memory: Killed process N (comm)", before
        # Linux 4.19 "Out of memory: Kill process N (comm) score M or sacrifice child", and the
        # same for a memory cgroup ("Memory cgroup out of memory: Kill process …")
        r"[Oo]ut of memory: Kill(ed)? process|"
        r"DefaultCPUAllocator: can't allocate memory|task \d+: Out Of Memory|\bOUT_OF_MEMORY\b|"
        # torch >= 2.1's CPU allocator (c10/core/impl/alloc_cpu.cpp), ROCm's caching allocator,
        # cuBLAS failing to allocate its workspace/handle, the driver API's error name
        r"DefaultCPUAllocator: not enough memory|HIP out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
        r"CUDA_ERROR_OUT_OF_MEMORY|"
        # NCCL (include/alloc.h, checks.h): its own allocations and CUDA calls that ran out
        # (CUDACHECK's WARN is "Cuda failure N '…'", before NCCL 2.19 "Cuda failure '…'")
        r"Failed to CUDA calloc|Failed to CUDA malloc|Cuda failure (\d+ )?'out of memory'|"
        r"Failed to CUDA host alloc \d+ bytes|NCCL WARN Failed to malloc \d+ bytes|"
        r"Unrecoverable error detected: malloc\(size=\d+\) returned null|"
        r"cudaErrorMemoryAllocation|memory allocation of .*bytes failed|"
        # slurmstepd: the cgroup's OOM handler, and older Slurm's memory-limit enforcement
        r"killed by the cgroup out-of-memory handler|[Ee]xceeded (job|step) memory limit|"
        # slurmstepd's accounting (jobacct_gather) killing a job or step over its --mem
        r"\b(Job|Step) \S+ exceeded memory limit \(\d+ > \d+\), being killed|"
        # the kubelet evicting a pod (eviction manager: "The node was low on resource: …")
        r"The node was low on resource: memory",
        "memory exhausted",
        _OOM_FIX,
    ),
    # torch's DataLoader (csrc/DataLoader.cpp) names the signal a worker died of; a worker
    # SIGKILLed ("Killed") is, but for a person's kill -9, the kernel's OOM killer: workers are
    # forked copies whose memory grows with the data they hold (SIGBUS is /dev/shm, below)
    Signature(
        "out-of-memory",
        r"DataLoader worker \(pid\(?s?\)? ?[\d, ]+\) is killed by signal: Killed",
        "a DataLoader worker was killed (SIGKILL): host memory ran out and the kernel's OOM killer "
        "took it",
        "use fewer DataLoader workers (num_workers) or a smaller prefetch_factor, hold less data "
        "in the Dataset object, or ask for more host memory (--mem); dmesg names the OOM kill",
    ),
    # a CUDA kernel of the rank's own faulted (CUDA's cudaErrorIllegalAddress, a device-side
    # assert (ATen's CUDA_KERNEL_ASSERT), a misaligned address, a launch failure): the
    # process is lost, whoever reports it (the rank, or ProcessGroupNCCL's watchdog)
    Signature(
        "rank-crashed",
        r"CUDA error: (an illegal memory access was encountered|device-side assert triggered|"
        r"misaligned address|unspecified launch failure|an illegal instruction was encountered)|"
        r"CUDA_ERROR_ILLEGAL_ADDRESS|cudaErrorIllegalAddress|"
        # the same errors met by a CUDA call inside NCCL (CUDACHECK: "Cuda failure [N] '…'")
        r"Cuda failure (\d+ )?'(an illegal memory access was encountered|device-side assert "
        r"triggered|misaligned address|unspecified launch failure)'|"
        # the device-side assert itself, as CUDA's __assert_fail prints it in the kernel
        # ("file.cu:L: kernel: block: [x,y,z], thread: [x,y,z] Assertion `cond` failed.")
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .* failed",
        "a CUDA kernel of a rank faulted (illegal memory access, a device-side assert): a bug in "
        "that kernel or its inputs (an index out of range)",
        "rerun that rank with CUDA_LAUNCH_BLOCKING=1 to see the kernel that faulted; check the "
        "indices it is given (labels, embeddings) and custom CUDA extensions",
    ),
    Signature(
        "port-in-use",
        r"[Aa]ddress already in use|EADDRINUSE|failed to listen on any local network|"
        r"port \d+ is (already )?in use",
        "the rendezvous port is already taken on the master",
        _PORT_FIX,
    ),
    Signature(
        "network-unreachable",
        r"[Nn]o route to host|[Nn]etwork is unreachable|EHOSTUNREACH|ENETUNREACH|"
        r"Unable to find address for|no socket interface found|"
        r"Bootstrap : no socket interface|NCCL WARN.*[Cc]onnect.*failed|"
        # NCCL's socket transport (transport/net_socket.cc) with no interface to use
        r"NET/Socket : (no interface found|No usable listening interface found)|"
        # NCCL's sockets (src/misc/socket.cc) and IB verbs (src/transport/net_ib.cc)
        r"ncclSocketInit|is neither AF_INET|socketStartConnect: Connect to .* failed|"
        r"NET/Socket : .*failed|NET/IB ?: Got completion (from peer .* )?with (error|status=[1-9])|"
        # NCCL >= 2.24 names the status (net_ib/p2p.cc: "status=IBV_WC_RETRY_EXC_ERR(12)"); its
        # socket layer (os/linux.cc) giving up on a peer's address: "connect to ADDR returned
        # Connection refused, exceeded error retry count" (an address no peer listens on: often
        # an interface every node has alike, docker0)
        r"NET/IB ?: Got completion from peer .* with status=[A-Z_]+\([1-9]\d*\)|"
        r"NCCL WARN .*connect to \S+ returned .*exceeded error retry count|"
        # NCCL's verbs wrapper (misc/ibvwrap.cc): moving a queue pair to RTR/RTS needs the
        # remote NIC reachable (routing, GID index, rails)
        r"Call to ibv_modify_qp failed|"
        # NCCL's socket layer (misc/socket.cc): no socket of the bootstrap's address family
        # (no IP interface, or the one named has no address of that family)
        r"Socket creation failed|"
        # the aws-ofi-nccl net plugin (libfabric: EFA, CXI/Slingshot, verbs providers) on a
        # request the fabric could not complete: "NET/OFI Request 0x… completed with error. RC:
        # <fi errno>. Error: <provider errno> (<provider text>)": RC 113 EHOSTUNREACH, 101
        # ENETUNREACH, 110 ETIMEDOUT, or the provider saying the packet could not be delivered
        # (CXI's C_RC_UNDELIVERABLE) or the destination is unreachable (EFA)
        r"NET/OFI .*completed with error\. RC: (113|101|110)\b|"
        r"NET/OFI .*completed with error\..*\((UNDELIVERABLE|[^)]*[Uu]nreachable[^)]*)\)",
        "the nodes cannot reach each other on this network interface",
        _IFACE_FIX,
    ),
    Signature(
        "link-fault",
        r"NET/IB : .*Got async event : (port error|local catastrophic error|.*link)|"
        # NCCL >= 2.24's wording (net_ib): "NET/IB : mlx5_0:1 async fatal event: …"
        r"NET/IB ?: \S+ async fatal event",
        "the InfiniBand/RoCE port reported an error: a failing or flapping link",
        "drain the node and have the link checked (ibstat, the switch port); exclude the node",
    ),
    # the launchers that start nodes over ssh (pdsh, deepspeed, accelerate's, mpirun)
    Signature(
        "ssh-unreachable",
        r"ssh: connect to host .* port \d+:|Permission denied \(publickey|"
        r"Host key verification failed|ssh: Could not resolve hostname|"
        r"ssh exited with exit code 255|"
        # deepspeed's launcher (launcher/runner.py) checks `ssh -o PasswordAuthentication=no
        # HOST hostname` before it starts anything, and says so when that fails
        r"Command '?ssh .*returned non-zero exit status 255|was not reachable via ssh|"
        # paramiko (client.py, pkey.py, ssh_exception.py), which launchers that start the
        # other nodes from Python use (fabric: colossalai run's multinode_runner prints
        # "Error: failed to run … on HOST, is localhost: False, exception: <paramiko's text>")
        r"No authentication methods available|not a valid \w+ private key file|"
        r"Unable to connect to port \d+ on |Bad authentication type; allowed types|"
        r"Server '?\S+'? not found in known_hosts|Error reading SSH protocol banner|"
        r"paramiko\.\S*(AuthenticationException|PasswordRequiredException)",
        "the launcher could not ssh into a node",
        _SSH_FIX,
    ),
    Signature(
        "shm-exhausted",
        r"insufficient shared memory|Error while creating shared memory segment|"
        r"unable to (allocate|open|write to) shared memory|No space left on device.*shm|"
        r"/dev/shm.*No space left on device|"
        # NCCL (include/shm.h) sizing its segment; torch's DataLoader on a worker's SIGBUS
        r"posix_fallocate failed|workers are out of shared memory|raise your shared memory limit|"
        r"failed to extend /dev/shm/\S+ to \d+ bytes|"
        # torch's shared-memory tensors (MapAllocator) live in /dev/shm as /torch_<pid>_<n>
        r"unable to (write to|open|mmap) file </torch_",
        "/dev/shm is too small for the shared memory segments",
        _SHM_FIX,
    ),
    # errno ENOSPC (28) and EDQUOT (122) as Python and the C library word them: after the
    # /dev/shm signatures, which claim the same words for shared memory
    Signature(
        "disk-full",
        r"No space left on device|[Dd]isk quota exceeded|\bENOSPC\b|\bEDQUOT\b|"
        r"The node was low on resource: ephemeral-storage|"  # the kubelet evicting a pod
        # torch.save's zip writer (caffe2/serialize/inline_container.cc): a short write is
        # miniz's "file write failed"; the write after it finds the file position off
        r"PytorchStreamWriter failed writing .*: file write failed|"
        r"\bunexpected pos \d+ vs \d+|"
        # Hugging Face datasets (builder.py) checks the room for a download before it starts
        r"Not enough disk space\. Needed:",
        "a write failed: the filesystem is full or the user's quota is used up",
        "free space or ask for more quota (df -h / quota -s on the path); write checkpoints, "
        "caches (TRITON_CACHE_DIR, HF_HOME, TMPDIR) and logs to a filesystem with room",
    ),
    # gloo's full-mesh connect (ProcessGroupGloo.cpp "Gloo connectFullMesh failed with " +
    # gloo's what(); transport/tcp/pair.cc: "timed out connecting: SO_ERROR: …, remote=[…]",
    # older gloo "connect [ADDR]:PORT: Connection refused"): the store already worked (every
    # rank got its peers' addresses), so the ranks cannot reach the addresses their peers bound
    # (GLOO_SOCKET_IFNAME, a hostname that resolves to loopback, a firewall). A peer that went
    # away mid-connect ("reset/closed by peer") is a consequence, below
    Signature(
        "network-unreachable",
        r"Gloo connectFullMesh failed.*(\bno error\b|timed out|[Cc]onnection refused|"
        r"[Nn]o route to host|[Nn]etwork is unreachable)|"
        r"\btimed out connecting: SO_ERROR: |"
        r"pair\.cc:\d+\] connect \[[^\]]+\]:\d+: (Connection refused|No route to host|"
        r"Connection timed out|Network is unreachable)",
        "Gloo's ranks could not connect to each other at the addresses their peers bound",
        "set GLOO_SOCKET_IFNAME (one interface name) to the interface that routes between the "
        "nodes on every node, make each node's hostname resolve to that address (not 127.0.x.x "
        "in /etc/hosts), and check the firewall",
    ),
    # a rank could not fetch a file from the Hub (or any URL) and had no cached copy: compute
    # nodes without internet, a proxy, an outage; transformers (utils/hub.py cached_file: "We
    # couldn't connect to '…' to load this file, couldn't find it in the cached files"; older
    # "…to load this model", "Connection error, and we cannot find the requested files in the
    # cached path"), huggingface_hub's LocalEntryNotFoundError and OfflineModeIsEnabled, datasets'
    # "Couldn't reach … on the Hub", requests/urllib3 retries exhausted on a host name
    Signature(
        "download-failed",
        r"We couldn't connect to '[^']*' to load this (?:file|model)|"
        r"Connection error, and we cannot find the requested files in the cached path|"
        r"LocalEntryNotFoundError:|OfflineModeIsEnabled:|Couldn't reach '?\S+'? on the Hub|"
        # the exception, not huggingface_hub's warning "'(MaxRetryError(…))' thrown while
        # requesting HEAD …" before it retries or falls back to its cache
        r"(?:ConnectionError|ConnectTimeout|ReadTimeout): \(?(?:MaxRetryError\(['\"])?"
        r"HTTPSConnectionPool\(host=\\?'[^'\\]+\\?', port=\d+\): Max retries exceeded with url|"
        r"<urlopen error \[Errno -?\d+\] (?:Temporary failure in name resolution|"
        r"Name or service not known|Network is unreachable|Connection timed out)>",
        "a rank could not download a file (model, tokenizer, dataset) and had no cached copy",
        "download it where there is internet (the login node) into a cache every node reads "
        "(HF_HOME on shared storage) and run with HF_HUB_OFFLINE=1, or set the proxy "
        "(HTTPS_PROXY) for compute nodes",
    ),
    Signature(
        "connection-refused",
        r"[Nn]ame or service not known|Temporary failure in name resolution|"
        r"[Nn]odename nor servname|getaddrinfo.*failed|failed to resolve|"
        r"Name does not resolve|"  # musl's (Alpine, busybox) EAI_NONAME
        # NCCL (misc/socket.cc) resolving NCCL_COMM_ID or a peer's name with getaddrinfo
        r"Net : error encountered when getting address info",
        "the master address does not resolve",
        "set MASTER_ADDR to a hostname every node resolves (the first node of the job)",
    ),
    # c10d's store client (socket.cpp SocketConnectOp) retries a refused or reset connection
    # (nobody listens yet: only an INFO line every 30 s) and a connect that timed out (the
    # address never answered: "[W] The server socket on … has timed out, will retry"; before
    # torch 2.2 "[W] The client socket has failed to connect to … (errno: 110 - Connection
    # timed out)") until its timeout, then throws this. Alone it says the master's store did
    # not come up within the whole timeout: rank 0 started late (nodes set up at different
    # speeds, slow work before init_process_group) or never; when the retries say the address
    # never answered, that is the cause (verdict._never_answered)
    Signature(
        "rendezvous-timeout",
        r"client socket has timed out after \S+ while trying to connect|"
        # torch <= 1.10's TCPStore: "connect() timed out. Original timeout was N ms."
        r"connect\(\) timed out\. Original timeout was",
        "a rank waited the whole timeout for the master's store and it never accepted a "
        "connection: rank 0 started late (or not at all) while this rank was ready",
        "start the master (node rank 0) no later than the others, or raise the rendezvous/"
        "init timeout (init_process_group(timeout=…), the launcher's) when rank 0 does long "
        "work (data preparation, environment set-up) before init_process_group; when it never "
        "starts, check MASTER_ADDR/MASTER_PORT",
    ),
    # the address never answered a connect (SYN dropped: a wrong MASTER_ADDR, a host that is
    # down, a firewall): c10d retries it (socket.cpp, torch >= 2.2; errno 110 before)
    Signature(
        "connection-refused",
        r"\[W.*server socket on \S+ has timed out, will retry|"
        r"\[W.*client socket has failed to connect to .*\(errno: 110 - ",
        "the master address never answered a connection (connect timed out, retrying): a wrong "
        "MASTER_ADDR, a host that is down, or a firewall dropping the port",
        "set MASTER_ADDR to the first node of the job (an address every node reaches) and "
        "check that no firewall drops MASTER_PORT between the nodes",
        Tier.WEAK,
        refuted_by="registered",  # the retry connected: the group formed
    ),
    # torch retries connecting while the master starts: benign unless nothing else is found
    # (c10d's warning-level "[W …socket.cpp…] The client socket has failed to connect to …")
    Signature(
        "connection-refused",
        r"\[W.*socket\.cpp.*([Cc]onnection refused|client socket has failed to connect)",
        "a rank could not connect to the master yet (retrying)",
        _REFUSED_FIX,
        Tier.WEAK,
        refuted_by="registered",  # the retry connected: the group formed
    ),
    Signature(
        "connection-refused",
        r"failed to connect/validate to host .* retrying",
        "a rank could not connect to the master yet (retrying)",
        _REFUSED_FIX,
        Tier.WEAK,
        refuted_by="registered",  # the retry connected: the group formed
    ),
    Signature(
        "connection-refused",
        r"[Cc]onnection refused|ECONNREFUSED|client socket has failed to connect",
        "nobody listens at the master address and port",
        _REFUSED_FIX,
    ),
    # torchelastic's c10d rendezvous backend (c10d_rendezvous_backend.py) wraps the store's own
    # error ("See inner exception for details."): that error, when printed, says why
    Signature(
        "connection-refused",
        r"RendezvousConnectionError: The connection to the C10d store has failed",
        "the node could not reach the rendezvous store (--rdzv-endpoint): nobody listened there, "
        "or it was unreachable",
        "check that --rdzv-endpoint names a host:port of the first node that every node reaches, "
        "that the first node started, and that no other job holds that port",
        Tier.WEAK,
    ),
    # the verdict line of a stall report (RUN_DIR/stall-<time>.txt, noderun's console)
    Signature(
        "stalled-rank",
        r"^(noderun: )?stalled-rank: ",
        "a rank stopped making progress and holds up the others (evidence: rank, host, frame)",
        "fix the call at that rank's frame (data loading, I/O, a lock, a dead mount) or bound it "
        "with a timeout; the stall report holds every rank's stack",
    ),
    # c10d's ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compares ranks' collectives
    Signature(
        "collective-deadlock",
        r"Detected mismatch between collectives|"
        # gloo (transport/tcp/pair.cc GLOO_ENFORCE_LE): a peer sent a larger buffer than this
        # rank posted for the same collective: the ranks' tensors differ in size (worded as a
        # collective mismatch since pytorch/gloo#456)
        r"op\.preamble\.length <= op\.nbytes|"
        # NCCL's socket transport (net_socket.cc) receiving more than the posted size
        r"NET/Socket : peer \S+ message truncated : receiving \d+ bytes instead of|"
        r"Received data size doesn't match expected size\. Is there a distributed collective "
        r"mismatch|"
        # NCCL's own check of the collectives ranks call
        r"Mismatched collective detected",
        "ranks called different collectives (c10d's desync check caught it)",
        "make every rank call the same collectives in the same order, with the same shapes: "
        "look for a collective inside a rank- or data-dependent branch",
    ),
    Signature(
        "collective-deadlock",
        r"^(noderun: )?collective-deadlock: ",
        "ranks wait in different collectives, so none can complete (a deadlock)",
        "make every rank call the same collectives in the same order: look for a collective "
        "inside a rank-dependent branch at the lines named",
    ),
    # Horovod's stall check: some ranks wait for others that never submit the tensor
    Signature(
        "stalled-rank",
        r"submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting",
        "some ranks wait in a collective that the others never join (a stalled rank)",
        "find the rank that is missing (the warning lists the tensors and ranks) and why it "
        "stopped: data loading, a rank-dependent branch, I/O",
        Tier.WEAK,
    ),
    Signature(
        "stalled-rank",
        r"^(noderun: )?stalled-job: ",
        "the job stopped making progress with every rank at the same place",
        "look at that frame: a peer outside the job, a slow filesystem or network, or a wait "
        "that never ends; the stall report holds every rank's stack",
        Tier.WEAK,
    ),
    # ProcessGroupNCCL's watchdog (ProcessGroupNCCL.cpp): after this line it takes the whole
    # process down ("To avoid data inconsistency, we are taking the entire process down")
    Signature(
        "collective-timeout",
        r"Watchdog caught collective operation timeout",
        "a collective did not complete in time: a rank is stuck, dead, or calls other collectives",
        "make every rank call the same collectives in the same order; find the stuck rank "
        "(TORCH_DISTRIBUTED_DEBUG=DETAIL); raise the timeout only for slow steps",
        ends_run=True,
    ),
    Signature(
        "collective-timeout",
        r"[Cc]ollective operation timeout|"
        r"Timed out waiting \d+ms for (recv|send)|"
        r"failed to pass monitoredBarrier|ProcessGroupNCCL.*[Tt]imeout",
        "a collective did not complete in time: a rank is stuck, dead, or calls other collectives",
        "make every rank call the same collectives in the same order; find the stuck rank "
        "(TORCH_DISTRIBUTED_DEBUG=DETAIL); raise the timeout only for slow steps",
    ),
    # the same in summary words (a wrapper's or a person's "NCCL timeout", "the collective timed
    # out"): torch's own records name the work (WorkNCCL(SeqNum=…, OpType=…)) and say it
    # better, so within the same second they are the evidence
    Signature(
        "collective-timeout",
        r"NCCL timeout|collective.*timed out",
        "a collective did not complete in time: a rank is stuck, dead, or calls other collectives",
        "make every rank call the same collectives in the same order; find the stuck rank "
        "(TORCH_DISTRIBUTED_DEBUG=DETAIL); raise the timeout only for slow steps",
        generic=True,
    ),
    # ProcessGroupNCCL's watchdog, when a work failed or timed out: what the NCCL WARN or the
    # timeout line before it says is the cause
    Signature(
        "collective-timeout",
        r"Heartbeat monitor timed out!|watchdog got stuck for \d+ seconds without making progress",
        "ProcessGroupNCCL's heartbeat monitor found the watchdog stuck (a collective or its "
        "abort hung)",
        "find the rank stuck in a collective (its stack, TORCH_DISTRIBUTED_DEBUG=DETAIL); the "
        "flight recorder dump (TORCH_NCCL_TRACE_BUFFER_SIZE) names the collective",
        Tier.CONSEQUENCE,
    ),
    Signature(
        "collective-timeout",
        r"Some NCCL operations have failed or timed out",
        "NCCL's watchdog saw a collective fail or time out",
        "find the first rank that failed or got stuck (its own error or stack); "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL names the collective",
        Tier.CONSEQUENCE,
    ),
    Signature(
        "rendezvous-timeout",
        r"(waiting for clients\.\s*|^\s*)\d+/\d+ clients joined|RendezvousTimeoutError|"
        r"ranks joined at .* never arrived|[Rr]endezvous.*timed? ?out|"
        r"could not reach the master|DistStoreError: wait timeout|"
        # c10d's store-based barrier: worker_count of world_size ranks arrived
        r"Timed out initializing process group in store based barrier",
        "some ranks or nodes never joined the rendezvous",
        _RDZV_FIX,
    ),
    # the count ("1/16 clients joined") may be wrapped onto the next line: it decides the cause
    Signature(
        "rendezvous-timeout",
        r"waiting for clients\.\s*$|DistStoreError: .*[Tt]imed? ?out",
        "the rendezvous timed out",
        _RDZV_FIX,
        Tier.WEAK,
    ),
    Signature(
        "fl-client-conflict",
        r"flare\.init.*[Tt]ime ?out|[Tt]ime ?out.*flare\.init|"
        r"[Cc]lient name .* (already|is) (registered|in use)|duplicate client|"
        r"[Dd]uplicate.*site",
        "several FL clients claim the same site, or flare.init timed out",
        "run one FL client per site and call flare.init on rank 0 only; broadcast to the others",
    ),
    # NCCL's CUDACHECK (src/include/checks.h): "Cuda failure N 'cudaGetErrorString'" for a
    # CUDA call of its own; these errors mean the NCCL build does not fit the CUDA runtime or
    # driver under it (a kernel image for another arch, a driver older than the build)
    Signature(
        "version-mismatch",
        r"NCCL WARN Cuda failure (\d+ )?'(CUDA driver version is insufficient|no kernel image is "
        r"available|invalid device function|the provided PTX was compiled with an unsupported)|"
        # the CUDA runtime's errors as torch raises them: a build for another driver or GPU
        r"CUDA driver version is insufficient for CUDA runtime version|"
        r"no kernel image is available for execution on the device",
        "a CUDA call inside NCCL failed: the NCCL build does not fit this CUDA driver or GPU",
        "use the NCCL that torch bundles, or one built for this CUDA version and driver, on "
        "every node (`noderun doctor` compares versions)",
    ),
    Signature(
        "version-mismatch",
        r"NCCL WARN Cuda failure (\d+ )?'invalid argument'",
        "a CUDA call inside NCCL was rejected ('invalid argument'): often an NCCL build that "
        "does not fit the CUDA runtime or driver",
        "try the NCCL that torch bundles, or another NCCL version built for this CUDA, on every "
        "node (`noderun doctor` compares versions)",
        Tier.WEAK,
    ),
    Signature(
        "version-mismatch",
        r"[Vv]ersion mismatch|[Mm]ismatch(ed)? versions?|versions? differ|"
        # NCCL's bootstrap compares the ranks' NCCL versions (src/init.cc); torch's CUDA init
        # and its extension builder (utils/cpp_extension.py) compare the driver's and CUDA's
        r"Mismatched NCCL version detected|NVIDIA driver on your system is too old|"
        r"CUDA Driver version found is \d+\. Minimum requirement is|"  # NCCL's init.cc
        r"mismatches the version that was used to compile PyTorch|"
        r"compiled (against|using) .*version|was compiled with .* but|undefined symbol:|"
        # a torch build without CUDA (cuda/__init__.py _lazy_init) or without NCCL
        # (distributed_c10d.py) where the job needs them
        r"Torch not compiled with CUDA enabled|Distributed package doesn't have NCCL built in",
        "software versions differ between nodes or builds",
        "install the same python, torch, CUDA and NCCL on every node (`noderun doctor` compares)",
    ),
    # EEXIST from os.makedirs/mkdir/symlink/rename (Python's FileExistsError): in a run of
    # several processes, another rank (often the local rank 0 of another node, on the same
    # shared filesystem) created the path first: a race on shared storage, as the two-writer
    # FileNotFoundError of a rename is
    Signature(
        "storage-missing",
        r"FileExistsError: \[Errno 17\]|\[Errno 17\] File exists",
        "a path already existed: ranks (the local rank 0 of each node, on one shared "
        "filesystem) created or renamed the same file or directory at once",
        "let only the global rank 0 create shared paths (checkpoints, logs, links), or give "
        "each rank its own; tolerate a path another rank made (exist_ok, catch FileExistsError)",
    ),
    Signature(
        "storage-missing",
        r"FileNotFoundError|[Nn]o such file or directory|checkpoint .* does not exist|"
        r"[Ss]tale file handle|ENOENT|\bFile \S+ not found|checkpoints? paths? (is|are) missing",
        "a file the job needs is missing (not on a shared filesystem?)",
        "put data and checkpoints on a filesystem every node mounts at the same path",
    ),
    # torch's summary of a NCCL result code (ProcessGroupNCCL/NCCLUtils "NCCL error in: …"):
    # NCCL printed why in a `NCCL WARN` line (or torch's `Last error:`) before it
    Signature(
        "rank-crashed",
        r"remote process exited or there was a network error|ncclRemoteError",
        "NCCL lost a peer: a remote rank exited, or the network dropped",
        _CRASH_FIX,
        Tier.CONSEQUENCE,
    ),
    # ncclInternalError's text (src/misc/utils.cc ncclGetErrorString): NCCL's own bug or an
    # unsupported setup; a NCCL WARN that says why (memory, network) outranks it
    Signature(
        "nccl-version-bug",
        r"internal error - please report this issue to the NCCL developers|"
        r"ncclInternalError: Internal check failed|"
        # NCCL's topology lookups (src/graph/topo.h ncclTopoIdToNetDev, ncclTopoRankToIndex,
        # ncclTopoDevToRank) WARN and return ncclInternalError when the topology NCCL built has
        # no node it itself refers to: the same internal error, in NCCL's own words
        r"NCCL WARN (Could not find NET with id|ncclTopoRankToIndex could not find rank|"
        r"ncclTopoDevToRank could not find rank)",
        "NCCL reported an internal error (a bug of that NCCL version, or a setup it mishandles)",
        "try another NCCL version (the one torch bundles, or a newer one: NCCL_DEBUG=INFO "
        "shows the WARN before the error); search NVIDIA/nccl issues for that WARN",
        Tier.WEAK,
    ),
    Signature(
        "network-unreachable",
        # (torch < 1.6 words it "NCCL Error 2: unhandled system error", nccl-tests "Test NCCL
        # failure file.cu:N 'unhandled system error …'")
        r"NCCL ([Ee]rror|failure).*unhandled system error|ncclSystemError",
        "NCCL reported a system error: a socket or InfiniBand call failed between the nodes",
        _IFACE_FIX + "; NCCL_DEBUG=INFO names the failing call",
        Tier.WEAK,
    ),
    # consequences: what the surviving ranks and the launchers report after a rank died
    Signature(
        "rank-crashed",
        r"[Cc]onnection (closed|reset) by peer|remote worker crash|[Bb]roken pipe|"
        r"ECONNRESET|Socket Timeout|Connection was likely closed|Failed to recv, got 0 bytes|"
        # ProcessGroupNCCL (NCCLUtils) on a communicator its watchdog or a failure aborted
        # (the "Original reason for failure", when a signature knows it, is matched before);
        # TCPStore's client when the store (rank 0's process) went away mid-wait; the
        # rendezvous another node's agent closed (elastic dynamic_rendezvous.py); gloo's
        # monitoredBarrier naming the rank it lost (ProcessGroupGloo.cpp)
        r"NCCL communicator was aborted on rank \d+|Stop_waiting response is expected|"
        r"RendezvousClosedError|successfully reached monitoredBarrier, but received errors|"
        # gloo (transport/tcp/pair.cc) on a read that failed other than by EOF
        r"typically caused by a remote worker hanging or bugs in the application",
        "a rank lost its peer (that peer failed first)",
        _CRASH_FIX,
        Tier.CONSEQUENCE,
    ),
    # Ray (python/ray/exceptions.py, the core worker) reports a task's or actor's worker
    # process that died: the caller's view of a death whose reason is the dead worker's own
    # (its log, or the "Worker exit detail:" Ray appends when it knows it: its memory
    # monitor's kill is matched above, before this)
    Signature(
        "rank-crashed",
        r"A worker died or was killed while executing (a|the) task by an unexpected system error|"
        r"The actor died unexpectedly before finishing this task|"
        r"The actor is dead because its worker process has died|"
        r"\b(RayActorError|ActorDiedError|WorkerCrashedError|ActorHandleNotFoundError)\b|"
        # vLLM's engine (v1/engine/core.py, utils.py wait_for_engine_startup) says so itself:
        # "Engine core initialization failed. See root cause above."
        r"Engine core initialization failed|EngineCore failed to start",
        "a Ray worker process died: the task or actor that used it lost it",
        "read the dead worker's own log (`ray logs worker-…`, the actor's lines above) for why it "
        "died: an exception, the OOM killer, a signal",
        Tier.CONSEQUENCE,
    ),
    # srun's line for tasks ended by SIGTERM, or by SIGKILL when they outlive the step's grace
    # (KillWait): a requeue of a preempted job cancels the step this way (the job's output keeps
    # the line across the restart), as do scancel and time limits
    Signature(
        "rank-crashed",
        r"srun: error: .*tasks? [\d,\-]+: (Terminated|Killed)",
        "srun reports ranks terminated (SIGTERM, then SIGKILL past the grace: scancel, a time "
        "limit, a preemption)",
        _CRASH_FIX,
        refuted_by="requeued",
        run_failed=True,
    ),
    # a rank that died of SIGBUS as its launcher reports it (torchelastic's "exitcode: -7" and
    # "Signal 7 (SIGBUS) received", deepspeed's "return code = -7", composer's "crashed with
    # exit code -7", spawn's, mpirun's, MPICH's, bash's): on Linux a write into a shared-memory
    # mapping tmpfs cannot back raises SIGBUS, and /dev/shm full (Docker's 64 MB default) is
    # what a data loader's workers or NCCL then hit; a report, after a rank's own words
    Signature(
        "shm-exhausted",
        r"^\s*exitcode\s*:\s*-7\b|[Ff]ailed \(exitcode: -7\)|[Ss]ignal 7 \(SIGBUS\) received|"
        r"\] exits with return code = -7\b|crashed with exit code -7\b|"
        r"process \d+ terminated with (?:signal SIGBUS|exit code -7)\b|"
        r"exited on signal 7 \(Bus error\)|^=\s+KILLED BY SIGNAL: 7\b|Bus error \(signal 7\)|"
        r"died with <Signals\.SIGBUS: 7>|srun: error: .*task \d+: Bus error|"
        r"^(?:\S+: line \d+: +\d+ )?Bus error(?: +\(core dumped\))?(?: +\S.*)?$",
        "a rank died of SIGBUS: most often /dev/shm is full (a data loader's workers or NCCL "
        "writing a shared-memory segment)",
        "give the job more shared memory (docker --shm-size or --ipc=host, a larger /dev/shm); "
        "if /dev/shm had room, run that rank alone (a native extension, a truncated mmapped file)",
        run_failed=True,
    ),
    # the launcher naming the rank that failed first (torchelastic's root cause, noderun, srun)
    Signature(
        "rank-crashed",
        r"^\s*exitcode\s*:\s*-?\d+|[Ff]ailed \(exitcode: -?\d+\)|job failed: rank|"
        # deepspeed's launcher (launcher/launch.py sigkill_handler), torch.multiprocessing.spawn
        r"\] exits with return code = -?\d+|process \d+ terminated with exit code -?\d+|"
        # torch.distributed.launch (torch < 1.9) and accelerate's simple launcher re-raise a
        # worker that exited non-zero as subprocess.CalledProcessError over the worker's argv
        # list (CPython's text: "Command '[…]' returned non-zero exit status N.")
        r"CalledProcessError: Command '\[[^\]]*\]' returned non-zero exit status [1-9]\d*|"
        # MPICH's Hydra block (above) for a process that exited non-zero, or, in older Hydra,
        # died of a signal (EXIT CODE: 9 for SIGKILL, 139/11 for SIGSEGV)
        r"^=\s+EXIT CODE: [1-9]\d*\s*$|"
        r"srun: error: .*task \d+: (Exited|Killed|Terminated|Segmentation|Aborted)",
        "the launcher reports that a rank failed",
        _CRASH_FIX,
        run_failed=True,  # a report: ranks after what a rank's own log names (findings.Ranker)
        generic=True,
    ),
    # torchelastic's summary names the signal a worker died of: a cause of its own, unlike
    # SIGTERM, which the agent sends the others to stop them
    Signature(
        "rank-crashed",
        r"[Ss]ignal (9|11|6|7|8|4) \(SIG(KILL|SEGV|ABRT|BUS|FPE|ILL)\) received|"
        # torch.multiprocessing.spawn's report (ProcessExitedException, before torch 1.5 a bare
        # Exception) of a process that died of a signal, and mpirun's (Open MPI, PRRTE help text
        # "proc-aborted-strsignal")
        r"process \d+ terminated with signal SIG(KILL|SEGV|ABRT|BUS|FPE|ILL)\b|"
        r"noticed that process rank \d+ with PID \d+ on node \S+ exited on signal (9|11|6|7|8|4)\b"
        # MPICH's mpiexec (Hydra) closes a job whose process died with a block of "=" lines:
        # "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES", "RANK N PID N RUNNING AT
        # host", then "KILLED BY SIGNAL: 9 (Killed)" (older Hydra: "EXIT CODE: 9", the signal's
        # number, below)
        r"|^=\s+KILLED BY SIGNAL: (9|11|6|7|8|4)\b"
        # the same launchers' CalledProcessError for a worker a signal killed (CPython: "Command
        # '[…]' died with <Signals.SIGKILL: 9>.")
        r"|CalledProcessError: Command '\[[^\]]*\]' died with "
        r"<Signals\.SIG(KILL|SEGV|ABRT|BUS|FPE|ILL): ",
        "a rank died from a signal (SIGKILL: often the OOM killer; SIGSEGV/SIGBUS: native code)",
        "find who sent it: the OOM killer (dmesg, `sacct -j ID -o State,MaxRSS`), a time limit, "
        "scancel; for SIGSEGV/SIGBUS run that rank alone to reproduce",
        run_failed=True,
    ),
    # the scheduler refused the request before anything ran: srun/salloc ("Unable to allocate
    # resources: <slurm_strerror>", src/srun/libsrun/allocate.c), srun's step ("Unable to create
    # step for job N: …", launch.c; older "Unable to create job step: …") and sbatch ("Batch job
    # submission failed: …", src/sbatch/sbatch.c); the reason after the colon says what to change
    Signature(
        "resource-request",
        r"\b(?:srun|salloc|sbatch): error: (?:Unable to allocate resources|"
        r"Unable to create (?:step for job \S+|job step)|Batch job submission failed): "
        # (not a step srun asks for after the job ended: "Job/step already completing or
        # completed" is what ended it speaking, a time limit or a cancel)
        r"(?:[^J]|J[^o])|"
        r"\b(?:srun|salloc|sbatch): error: (?:Invalid generic resource \(gres\) specification|"
        r"invalid partition specified|Invalid account or account/partition combination)",
        "SLURM refused the job's resource request (nothing ran)",
        "read the reason after the colon and fix the request: a partition/QOS that has the GPUs "
        "(`sinfo -o '%P %G %l'`), a GRES/--gpus spelling this cluster supports, a time within "
        "the partition's limit, an account allowed on it",
        run_failed=True,
    ),
    # slurmstepd (src/slurmd/slurmstepd/req.c): why it cancelled the step or job
    Signature(
        "time-limit",
        r"CANCELLED AT \S+ DUE TO TIME LIMIT|JOB \d+ ON \S+ CANCELLED .*TIME LIMIT|"
        # slurm_strerror(ESLURM_JOB_TIME_LIMIT_KILLED) (common/slurm_errno.c)
        r"Job killed due hitting max wall clock limit",
        "SLURM cancelled the job at its time limit",
        "ask for more time (--time), resume from a checkpoint, or find what made it slow or hang "
        "(the lines before it; `noderun submit` warns before the limit)",
        # the job ended TIMEOUT: work that finished before it (a sign) does not outweigh it, the
        # job hung at exit (verdict._after_the_work)
        ends_run=True,
    ),
    Signature(
        "preempted",
        r"CANCELLED AT \S+ DUE TO PREEMPTION",
        "SLURM preempted the job (a higher-priority job took its nodes)",
        "resubmit with --requeue and resume from a checkpoint, or use a partition/QOS that is "
        "not preemptible",
    ),
    Signature(
        "node-failure",
        r"CANCELLED AT \S+ DUE TO NODE FAILURE|[Nn]ode failure on \S+|NODE_FAIL|"
        # slurm_strerror(ESLURM_JOB_NODE_FAIL_KILLED) (common/slurm_errno.c)
        r"Job killed due node failure|"
        # srun (api/step_launch.c) losing its I/O connection to a node's slurmstepd: "If the
        # node is suspected to be down, abort the job"
        r"aborting, io error with slurmstepd on node \d+|"
        r"Aborting, (step missing and io error|io error and missing step) on node \d+|"
        r"Aborting, can not test connection to node \d+",
        "a node of the job failed, and SLURM cancelled the job",
        "resubmit (with --requeue, and --exclude for that node); resume from the last checkpoint",
    ),
    # SIGINT/SIGHUP come from outside (Ctrl-C, srun forwarding it, a closed terminal): launchers
    # stop their workers with SIGTERM/SIGKILL, never these. Python's KeyboardInterrupt (the
    # exception line of a rank that got SIGINT) and torchelastic's agent (elastic/multiprocessing
    # api.py _terminate_process_handler, agent/server/api.py; "2", or "Signals.SIGINT" before
    # Python 3.11) say the run was stopped from outside; SIGTERM may be srun stopping a step
    # after another task failed, so it stays a consequence (below)
    Signature(
        "interrupted",
        r"^KeyboardInterrupt\s*$|"
        r"SignalException: Process \d+ got signal: (Signals\.)?(SIGINT|SIGHUP|2|1)\b|"
        r"Received (Signals\.)?(SIGINT|SIGHUP|2|1) death signal, shutting down workers",
        "the run was stopped from outside with SIGINT/SIGHUP (Ctrl-C, or the terminal that ran "
        "it closed)",
        "start long runs in sbatch, tmux or nohup (not a terminal that may close); if it was "
        "stopped because it hung, the lines before the interrupt say where",
        # no report that the run failed: a run stopped so and then resumed to its end is fine;
        # like an exception's type line, it yields to what a line of the same second says
        generic=True,
    ),
    # torchelastic's agent got SIGTERM: scancel, a time limit, srun stopping the step after
    # another task failed, a supervisor: stopped from outside, a cause only when nothing else
    # was found (the agent then SIGTERMs its workers: "Sending process N closing signal")
    Signature(
        "interrupted",
        r"Received (Signals\.)?(SIGTERM|15) death signal, shutting down workers",
        "torchrun's agent was stopped with SIGTERM from outside (scancel, a time limit, srun "
        "after another task failed, or a supervisor process)",
        "find who sent it: `sacct -j ID -o State` (CANCELLED/TIMEOUT), the other nodes' logs for "
        "a task that failed first, or the supervisor's own log",
        Tier.WEAK,
        alone=True,  # no report that the run failed: a requeue stops agents so, then resumes
    ),
    # slurmstepd (req.c) names no reason when the job was cancelled from outside (scancel, or
    # the session that ran srun ended): after the DUE TO … lines above. The job's line is
    # that cancel; a step's line alone is also what a step killed after a failure prints,
    # so it only counts when nothing else was found
    Signature(
        "interrupted",
        # (req.c: "… DUE to SIGNAL Terminated ***" when the cancel sent SIGTERM or SIGKILL)
        r"\*\*\* JOB \S+ ON \S+ CANCELLED AT \S+ (DUE to SIGNAL \w+ )?\*\*\*",
        "SLURM cancelled the job without a reason: someone ran scancel, or the session that "
        "ran srun ended",
        _CANCEL_FIX,
        Tier.CONSEQUENCE,
        run_failed=True,
    ),
    Signature(
        "interrupted",
        r"\*\*\* STEP \S+ ON \S+ CANCELLED AT \S+ (DUE to SIGNAL \w+ )?\*\*\*",
        "SLURM cancelled the job step without a reason (scancel, the srun session ended, or "
        "srun stopped the step after a task failed)",
        _CANCEL_FIX,
        Tier.WEAK,
        run_failed=True,
        alone=True,
    ),
    # slurmstepd's line when a preempted job is requeued: the step's end, not a crash (before
    # the general "*** STEP … CANCELLED" below; a rank log keeps it across the restart)
    Signature(
        "requeued",
        r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+ DUE TO JOB REQUEUE",
        "SLURM requeued the job",
        "",
        Tier.SIGN,
    ),
    Signature(
        "rank-crashed",
        r"ChildFailedError|Root Cause \(first observed failure\)|Signal \d+ \(SIG\w+\) received|"
        r"\*\*\* STEP .* CANCELLED|died with <Signals|SignalException: Process \d+ got signal|"
        # slurmstepd (req.c) after a task failed: "*** STEP … ON … FAILED (non-zero exit code
        # or other failure mode) ***", "… CANCELLED AT … DUE TO TASK FAILURE ***"
        r"\*\*\* (STEP|JOB) \S+ ON \S+ FAILED \(non-zero exit code|"
        r"srun: error: .*task|"
        # Open MPI's mpirun after a rank exited non-zero (help-errmgr-base.txt)
        r"process returned\s+a non-zero exit code|noticed that process rank \d+ .*exited on signal|"
        r"one or more processes exited with non-zero status, thus causing",
        "the launcher stopped the other ranks after a failure",
        _CRASH_FIX,
        Tier.CONSEQUENCE,
        run_failed=True,
    ),
    # the shell's report of SIGABRT: a C++ exception nobody caught ("terminate called after
    # throwing …", whose what() line says why) or an abort(); that line is the evidence
    # Python's faulthandler names the fatal signal it caught ("Fatal Python error: Aborted" for
    # SIGABRT, then the threads' stacks): an abort says only that the process gave up, after
    # what it printed before (an uncaught C++ exception's what(), an abort())
    Signature(
        "rank-crashed",
        r"Aborted \(core dumped\)|Fatal Python error: Aborted",
        "a process aborted (SIGABRT), after the error printed before it",
        _CRASH_FIX,
        Tier.CONSEQUENCE,
    ),
    Signature(
        "rank-crashed",
        # (torch's DataLoader: "Unexpected segmentation fault encountered in worker.")
        r"[Ss]egmentation fault|[Cc]ore dumped|Fatal Python error",
        "a rank died from a signal",
        "run that rank alone to reproduce; check native extensions and memory",
    ),
    # bash's "Killed": SIGKILL from the OOM killer, a time limit or a person; which one, other
    # lines say (slurmstepd's oom-kill line outranks it)
    Signature(
        "rank-crashed",
        r"\bKilled\b",
        "a process was killed (SIGKILL)",
        "look for why: the OOM killer (dmesg, `sacct -j ID -o State`), a time limit, or scancel",
        Tier.CONSEQUENCE,
    ),
    # a program that caught a failure and says it tries again: the line is its own proof that it
    # went on (Lightning's BatchSizeFinder "Batch size 4096 failed, trying batch size 2048",
    # tuner/batch_size_scaling.py; a logger's "… failed …, will retry", "Error …, retrying in 5s").
    # A warning: the run's end, a launcher's report or a later error decide whether it failed;
    # the retries of a rendezvous/store connect have their own causes above
    Signature(
        "retried",
        r"(?i:\b(?:failed|error)\b.*(?:\bwill retry\b|\bretrying\b|\btrying batch size \d+))",
        "a failure the program caught and retried",
        "nothing to do if the run went on; if every retry failed, the last one's error says why",
        Tier.WARNING,
    ),
    # the last line of a traceback: the exception the first failing rank raised; or a logger's
    # record of one nobody caught (a framework's excepthook: OLMo's "Uncaught OLMoThreadError:
    # …", "Unhandled exception: ValueError …", "An error occurred: KeyError")
    Signature(
        "rank-crashed",
        r"^(\[rank\d+\]:\s*)?[A-Za-z_][\w.]*(Error|Exception|Interrupt)(:|$)|"
        r"[Ee]rror occurred:?\s+[A-Za-z_][\w.]*(Error|Exception)\b|"
        r"\b(?:Uncaught|Unhandled)(?: exception)?:?\s+[A-Za-z_][\w.]*(?:Error|Exception):",
        "a rank raised an exception",
        "fix the exception in the first failing rank's traceback",
        generic=True,
    ),
    Signature(
        "nccl-warning",
        r"NCCL WARN",
        "NCCL printed a warning",
        "nothing to do if the run went on; NCCL_DEBUG=INFO shows which transport it chose",
        Tier.WARNING,
    ),
    Signature(
        "warning",
        r"(?i:\bwarn(ing)?\b.*\b(error|failed|failure)\b)",
        "a warning that mentions a failure",
        "nothing to do if the run went on",
        Tier.WARNING,
    ),
    Signature(
        "unknown",
        r"(?i:\b(error|fatal|failed|failure|abort(ed)?)\b)",
        "an error with no known signature",
        "read the evidence line and the lines around it; add a signature to "
        "noderun/explain/signatures.py",
        Tier.LAST_RESORT,
    ),
    # signs of health: what a run that works prints
    Signature(
        "finished",
        r"`Trainer\.fit` stopped: `max_(?:epochs|steps|time)=[^`]*` reached|"
        r"noderun: job completed in |"
        # transformers' Trainer.train() at its end (its closing log holds the speed metrics)
        r"Training completed\. Do not forget to share your model|'train_runtime': \d|"
        # Megatron-LM's pretrain() (training/training.py print_datetime)
        r"\[after training is done\] datetime:|"
        # torchelastic's agent (elastic/agent/server/api.py) when every local worker exited 0
        # (WorkerState.SUCCEEDED), before its exit barrier; deepspeed's launcher
        # (launcher/launch.py) for each worker that exited 0
        r"worker group successfully finished\. Waiting \d+ seconds for other agents|"
        r"Local worker group finished \((?:WorkerState\.)?SUCCEEDED\)|"
        r"launch\.py:\d+:main\] Process \d+ exits successfully",
        "the run finished",
        "",
        Tier.SIGN,
    ),
    Signature(
        "registered",
        r"All distributed processes registered\. Starting with (\d+) processes",
        "every rank joined the process group",
        "",
        Tier.SIGN,
    ),
    # NCCL (src/init.cc) once a communicator of several ranks is up: every rank of it connected
    # (a launcher-less start makes communicators of one rank: "nranks 1")
    Signature(
        "registered",
        r"NCCL INFO comm \S+ rank \d+ nranks ([2-9]|\d\d+) .*Init COMPLETE",
        "every rank joined an NCCL communicator",
        "",
        Tier.SIGN,
    ),
    Signature(
        "member",
        r"GLOBAL_RANK: ([1-9]\d*), MEMBER: \d+/\d+",
        "a rank other than 0 announced itself",
        "",
        Tier.SIGN,
    ),
    Signature(
        "backend",
        r"^\s*distributed_backend=(\w+)",  # Lightning's banner
        "the process group backend",
        "",
        Tier.SIGN,
    ),
    Signature(
        "nccl-file",
        r"NCCL_GRAPH_FILE set by environment to",
        "NCCL read its graph (channels) from a file named in the environment",
        "",
        Tier.SIGN,
    ),
    Signature(
        "nccl-version",
        r"NCCL version (\d[\w.+-]*)",
        "the NCCL version a node runs",
        "",
        Tier.SIGN,
    ),
)


# an exception line the scanner found at the end of a traceback printed by a background thread
# (Python's threading.excepthook "Exception in thread NAME:", a thread whose first frame is
# threading's _bootstrap_inner, multiprocessing's queue feeder thread _feed, which catches and
# prints its own error): the thread ended, the process that started it went on
THREAD_EXCEPTION = Signature(
    "thread-exception",
    r"$^",
    "a background thread raised an exception and ended; the process went on",
    "nothing to do if the run went on; if the thread's work was needed (a data loader, an "
    "uploader), its traceback says why it stopped",
    Tier.WARNING,
)
