"""One case per signature added for issue 25, each taken from a real log of the corpus's tuning
part (tests/corpus/explain/<id>/: the key line, verbatim, with its source in case.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from noderun.explain import Scanner, explain
from noderun.explain.signatures import Tier

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "explain"

FROM_CORPUS = {
    "nccl-1837-ifname-missing": "network-unreachable",  # ncclSocketInit … neither AF_INET
    "verl-726-link-local-socket-connect-abort": "network-unreachable",  # socketStartConnect
    "nccl-733-ib-error-12-nics-unreachable": "network-unreachable",  # IB completion error 12
    "nccl-1235-cuda-calloc-oom-large-llm": "out-of-memory",  # Failed to CUDA calloc
    "peft-1703-nccl-cuda-failure-out-of-memory": "out-of-memory",  # Cuda failure 2
    "deepspeedexamples-321-host-memory-allocation-failed": "out-of-memory",
    "deepspeedexamples-894-pdsh-localhost-ssh-refused": "ssh-unreachable",
    "streaming-493-dataloader-bus-error-shm": "shm-exhausted",
    "nccl-1241-duplicate-gpu-megatron": "duplicate-gpu",
    "nccl-905-ib-port-error-flapping-link": "link-fault",
    "metaseq-52-store-barrier-1792-of-2048": "rendezvous-timeout",
    "lightning-19106-log-dict-keys-differ": "collective-deadlock",
    "deepspeed-2319-zero-checkpoints-missing-other-node": "storage-missing",
    "lightning-6169-requested-gpus-machine-has-one": "device-ordinal",
    "desitarget-628-srun-time-limit-debug-queue": "time-limit",  # slurmstepd
    "nemo-5819-ranks-duplicated-without-slurm-tasks": "missing-launcher",  # Lightning's env
    "nccl-296-mismatched-collective-ddp-cluster": "collective-deadlock",  # NCCL's own check
    "horovod-215-stalled-rank-16": "stalled-rank",  # Horovod's stall warning
    "thunder-665-two-node-keyerror": "rank-crashed",  # "An error occurred: KeyError"
    "cppo-6-accelerate-deepspeed-rank0-sigkill": "rank-crashed",  # Signal 9 (SIGKILL)
    # the second pass (issue 25, items 2-4), from the tuning part too
    "mfc-1748-ecc-uncorrectable-node-29": "gpu-fault",  # CUDA_ERROR_ECC_UNCORRECTABLE
    "gemmaker-242-slurm-job-cancelled-preemption": "preempted",  # slurmstepd … PREEMPTION
    "megatron-878-dataloader-bus-error-docker-shm": "shm-exhausted",  # DataLoader's SIGBUS
    "nccl-342-docker-shm-64mb-posix-fallocate": "shm-exhausted",  # NCCL's shm.h fallocate
    "nemorun-266-nccl-2-25-internal-error": "nccl-version-bug",  # ncclInternalError's text
    "trtllm-4238-nccl-2251-invalid-argument-2nodes": "version-mismatch",  # Cuda failure 1
    "horovod-2907-rank-sigkill-others-gloo-ioexception": "rank-crashed",  # bash's Killed
    # the third pass, from the tuning part of the grown corpus
    "dolly-139-checkpoint-no-space-left": "disk-full",  # [Errno 28] ENOSPC
    "cyclegan-1456-disk-quota-save-image": "disk-full",  # [Errno 122] EDQUOT
    "deepspeed-4907-ssh-check-master-itself-255": "ssh-unreachable",  # runner.py's ssh check
    "nccl-1105-accelerate-no-route-main-socket-timeout": "network-unreachable",  # Net : Connect
    "nccl-2013-ibv-modify-qp-timeout-rail-nics": "network-unreachable",  # ibvwrap QP RTR
    "nccl-426-roce-completion-error-12-gid-index": "network-unreachable",  # older IB wording
    "msswift-6368-dlc-master-name-does-not-resolve": "connection-refused",  # musl EAI_NONAME
    "nvsentinel-155-gpu-fallen-off-bus-no-xid": "gpu-fault",  # NVRM multi-line report
    "shinecluster-4-srun-step-cancelled-session-closed": "interrupted",  # reason-less STEP
    # the fourth pass, from the tuning part of the grown corpus
    "trellis2-90-illegal-memory-access-watchdog": "rank-crashed",  # a CUDA kernel fault
    "nccl-210-no-ip-interface-socket-creation": "network-unreachable",  # Socket creation failed
    "coquistt-2238-slurm-job-exceeded-memory-limit": "out-of-memory",  # jobacct_gather's kill
    # the fifth pass, from new tuning cases (SOURCES-corpus-f.md)
    "rlvigen-17-dataloader-worker-killed-memory-growth": "out-of-memory",  # worker SIGKILLed
    "pytorchbook-62-dataloader-worker-killed-memory-soaring": "out-of-memory",
    "lightning-14986-bootstrap-rank-checked-in-twice": "missing-launcher",  # bootstrap root
    "apex-99-env-world-size-not-set-no-launcher": "missing-launcher",  # env:// rendezvous
    "hrnet-35-env-rank-not-set-missing-launch": "missing-launcher",
    "hybrik-198-spawn-exception-process-sigkill": "rank-crashed",  # mp.spawn's report
    # the sixth pass, from new tuning cases (SOURCES-corpus-g.md)
    "signgraph-18-ddp-without-launcher-default-group": "missing-launcher",  # _get_default_group
    "mmsegmentation-809-syncbn-without-launcher": "missing-launcher",
    "corgs-23-no-cuda-gpus-visible-devices": "gpu-unavailable",  # torch's _cuda_init
    "modelangelo-60-slurm-job-without-gpu-allocated": "gpu-unavailable",  # NVML: no driver
    "horovod-98-ibv-create-qp-memlock": "memlock-limit",  # NCCL's ibvwrap, RLIMIT_MEMLOCK
    # the seventh pass (diag9): c10d's store client giving up after its whole timeout
    "llamafactory-6575-late-worker-store-timeout": "rendezvous-timeout",  # socket.cpp
    "xtuner-438-store-timeout-slow-data-load": "rendezvous-timeout",
    "styletts-18-unexpected-pos-drive-full": "disk-full",  # torch.save's position check
    "tinyfaces-12-cpu-allocator-laptop-8g": "out-of-memory",  # "DefaultCPUAllocator: not enough"
    "rtdaction-31-ctrl-c-stuck-run-death-signal-2": "interrupted",  # the agent got SIGINT
    "lerobot-3818-ctrl-c-stuck-training-death-signal-2": "interrupted",
    # the eighth pass (diag10), from new tuning cases (SOURCES-corpus-i.md)
    "colossalai-3066-ssh-no-authentication-methods": "ssh-unreachable",  # paramiko client.py
    "colossalai-5213-ssh-not-a-valid-rsa-key": "ssh-unreachable",  # paramiko pkey.py
    "automodel-3686-makedirs-race-on-shared-fs": "storage-missing",  # EEXIST, cut by the paste
    "dle-1092-tacotron2-multinode-checkpoint-symlink-race": "storage-missing",  # EEXIST symlink
    "nemo-13996-nccl-could-not-find-net-id-0-multinode": "nccl-version-bug",  # graph/topo.h
    # the ninth pass (diag11), from new tuning cases (SOURCES-corpus-j.md)
    "openrlhf-936-ray-task-killed-node-low-memory": "out-of-memory",  # Ray's memory monitor
    "sglang-3226-gloo-connectfullmesh-no-error": "network-unreachable",  # ProcessGroupGloo
    # the twelfth pass (diag14), from new tuning cases (SOURCES-corpus-m.md)
    "easyr1-185-raylet-worker-killed-memory-pressure": "out-of-memory",  # raylet's summary
    "plantf-28-raylet-12-workers-killed-oom": "out-of-memory",
}


def _key_line(case_id: str) -> str:
    path = CORPUS / case_id / "case.toml"
    if not path.is_file():
        pytest.skip(f"corpus case {case_id} not merged here")
    return str(tomllib.loads(path.read_text())["key_line"])


@pytest.mark.parametrize(("case_id", "cause"), sorted(FROM_CORPUS.items()))
def test_the_key_line_of_a_real_log_is_its_cause(case_id: str, cause: str) -> None:
    signature = Scanner().classify(_key_line(case_id))
    assert signature is not None and signature.cause == cause


def test_slurms_node_failure_line() -> None:
    line = (
        "slurmstepd: error: *** JOB 1234 ON node3 CANCELLED AT 2026-11-25T10:00:00 DUE TO NODE "
        "FAILURE ***"
    )
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "node-failure"


def write(path: Path, *lines: str) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_healthy_nccl_teardown_is_no_failure(tmp_path: Path) -> None:
    log = write(
        tmp_path / "ok.log",
        "node01:2211:2211 [3] NCCL INFO comm 0x55d0c3a4b2c0 rank 3 nranks 32 cudaDev 3 "
        "busId 4f000 - Abort COMPLETE",
        "node01:2211:2211 [3] NCCL INFO comm 0x55d0c3a4b2c0 rank 3 nranks 32 - Destroy COMPLETE",
    )
    assert explain([log]) == []


def test_nccls_reason_beats_torchs_result_code_summary(tmp_path: Path) -> None:
    log = write(
        tmp_path / "r.log",
        "node2:812:900 [1] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1296, internal error - please report this issue to the NCCL "
        "developers, NCCL version 2.18.1",
    )
    causes = [f.cause for f in explain([log])]
    assert causes[0] == "out-of-memory"


def test_a_store_barrier_with_one_worker_of_two_is_a_rendezvous_timeout(tmp_path: Path) -> None:
    log = write(
        tmp_path / "b.log",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
        "for key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
    )
    assert next(f.cause for f in explain([log])) == "rendezvous-timeout"


def test_a_finished_run_that_dies_at_exit_is_a_finalization_abort(tmp_path: Path) -> None:
    log = write(
        tmp_path / "exit.log",
        "epoch 3/3 loss=0.12",
        "training finished",
        "free(): invalid pointer",
    )
    assert [f.cause for f in explain([log])] == ["finalization-abort"]


def test_an_unclassified_failure_names_its_first_error_line_and_every_last_line(
    tmp_path: Path,
) -> None:
    from noderun.explain import examine

    a = write(tmp_path / "rank0.log", "step 1", "FATAL: license server unavailable", "bye")
    b = write(tmp_path / "rank1.log", "step 1", "step 2")
    verdict = examine([a, b])
    assert verdict.unclassified
    assert verdict.failures[0].evidence.line == 2
    assert [(e.file, e.line, e.text) for e in verdict.last_lines] == [
        (a, 3, "bye"),
        (b, 2, "step 2"),
    ]


def test_a_run_that_finished_its_work_then_failed_at_exit_says_so(tmp_path: Path) -> None:
    log = write(
        tmp_path / "r.log",
        "{'train_runtime': 812.4, 'train_loss': 0.41, 'epoch': 3.0}",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "[rank1]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, Timeout(ms)=600000) ran "
        "for 600031 milliseconds before timing out.",
        "srun: error: node2: task 1: Aborted (core dumped)",
    )
    findings = explain([log])
    assert findings[0].cause == "finalization-abort"
    assert "the work finished" in findings[0].summary
    assert findings[1].cause == "collective-timeout"


def test_a_failure_before_the_work_finished_is_not_an_exit_failure(tmp_path: Path) -> None:
    log = write(
        tmp_path / "r.log",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
        "srun: error: node2: task 1: Exited with exit code 1",
    )
    assert explain([log])[0].cause == "out-of-memory"


def test_lightning_world_larger_than_the_launch_is_not_a_missing_launcher(
    tmp_path: Path,
) -> None:
    log = write(  # 1 node x 4 processes, Trainer(num_nodes=2, devices=4)
        tmp_path / "r.log",
        *(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(4)),
    )
    root = explain([log])[0]
    assert root.cause == "rendezvous-timeout" and "expects 8" in root.summary
    twice = write(  # every node believes it is node 0: rank 0 is claimed twice
        tmp_path / "d.log",
        *(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(4)),
        *(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(4)),
    )
    assert explain([twice])[0].cause == "missing-launcher"


def _case_logs(case_id: str) -> list[str]:
    folder = CORPUS / case_id
    if not folder.is_dir():
        pytest.skip(f"corpus case {case_id} not merged here")
    return [str(p) for p in sorted(folder.iterdir()) if p.suffix in (".log", ".txt")]


def test_a_graph_file_from_the_environment_is_the_evidence_of_nccl_config() -> None:
    """NCCL's 'XML Import Channel : dev 1 not found' names the failure; the NCCL_GRAPH_FILE
    line (an image's setting for another GPU count) is why (tuning case nccl-1240)."""
    root = explain(_case_logs("nccl-1240-nccl-graph-file-from-image"))[0]
    assert root.cause == "nccl-config"
    assert "NCCL_GRAPH_FILE set by environment" in root.evidence.text


def test_nccls_no_plugin_info_line_is_no_missing_file(tmp_path: Path) -> None:
    log = write(
        tmp_path / "p.log",
        "n1:16674:16674 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
        "libnccl-net.so: cannot open shared object file: No such file or directory",
    )
    assert explain([log]) == []


def test_slurmstepds_chdir_fallback_is_no_failure(tmp_path: Path) -> None:
    log = write(  # tuning case deepops-1179 (healthy): the step ran in /tmp
        tmp_path / "c.log",
        "slurmstepd: error: couldn't chdir to `/root/burst-buffer': No such file or directory: "
        "going to /tmp instead",
        "epoch 1 loss 0.3",
    )
    assert [f.cause for f in explain([log]) if f.tier < Tier.WARNING] == []


def test_lightning_members_all_present_are_no_failure(tmp_path: Path) -> None:
    log = write(  # tuning case lightning-1345 (healthy): 2 nodes x 2, every member announced
        tmp_path / "m.log",
        *(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in range(4)),
    )
    assert [f.cause for f in explain([log]) if f.tier < Tier.WARNING] == []


def test_different_nccl_versions_are_a_failure_and_the_older_is_the_evidence(
    tmp_path: Path,
) -> None:
    a = write(tmp_path / "node1.log", "NCCL version 2.14.3+cuda11.7")
    b = write(tmp_path / "node4.log", "NCCL version 2.19.3+cuda12.3")
    root = explain([b, a])[0]
    assert root.cause == "version-mismatch" and "2.14.3" in root.evidence.text


def test_an_unhandled_cuda_error_line_that_mentions_nccl_debug_info_is_an_error(
    tmp_path: Path,
) -> None:
    log = write(
        tmp_path / "u.log",
        "Failed, NCCL error allreduceOp.cpp:308 'unhandled cuda error (run with NCCL_DEBUG=INFO "
        "for details)'",
    )
    assert explain([log])[0].cause == "unknown"


def test_an_exception_python_ignored_at_exit_is_no_failure(tmp_path: Path) -> None:
    log = write(  # Python's own report of an exception in __del__: the process goes on
        tmp_path / "x.log",
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2c>",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1479, '
        "in __del__",
        "    self._shutdown_workers()",
        "AttributeError: 'NoneType' object has no attribute 'python_exit_status'",
    )
    assert [f.cause for f in explain([log]) if f.tier < Tier.WARNING] == []
    raised = write(
        tmp_path / "r.log",
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "KeyError: 'x'",
    )
    assert explain([raised])[0].cause == "rank-crashed"


def test_ncclinternalerrors_last_error_line_says_why(tmp_path: Path) -> None:
    """ncclInternalError is a version bug only when NCCL says nothing more: its 'Last error:'
    line (here a tuner plugin without its config) names the cause."""
    log = write(
        tmp_path / "t.log",
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, internal error - "
        "please report this issue to the NCCL developers, NCCL version 2.27.5",
        "ncclInternalError: Internal check failed.",
        "Last error:",
        "No NCCL_TUNER_CONFIG_PATH provided. Please populate NCCL_TUNER_CONFIG_PATH to use "
        "config-based tuner plugin.",
    )
    assert explain([log])[0].cause == "nccl-config"
    alone = write(tmp_path / "a.log", *Path(log).read_text().splitlines()[:3])
    assert explain([alone])[0].cause == "nccl-version-bug"


def test_a_scancelled_job_is_interrupted_and_its_steps_line_is_not_the_cause(
    tmp_path: Path,
) -> None:
    # the lines scancel leaves (same wording as qiskit-community/spank-plugins#17's slurm-3.out)
    log = write(
        tmp_path / "slurm-3.out",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "slurmstepd: error: *** STEP 3.0 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***",
        "slurmstepd: error: *** JOB 3 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***",
        "srun: forcing job termination",
    )
    root = explain([log])[0]
    assert root.cause == "interrupted" and "*** JOB 3" in root.evidence.text


def test_a_steps_reasonless_cancel_yields_to_what_killed_it(tmp_path: Path) -> None:
    # knet-30 / hafs-101: the OOM handler's line, then the step's CANCELLED line
    log = write(
        tmp_path / "oom.out",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.",
        "srun: error: gpu20-15: task 0: Out Of Memory",
        "slurmstepd: error: *** STEP 9411285.0 ON gpu20-15 CANCELLED AT 2022-05-17T17:58:10 ***",
    )
    assert explain([log])[0].cause == "out-of-memory"


def test_a_shared_memory_full_line_is_not_a_full_disk() -> None:
    nccl = "include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device"
    assert Scanner().classify(nccl).cause == "shm-exhausted"  # type: ignore[union-attr]
    torch_shm = "RuntimeError: unable to write to file </torch_1394_2747491098>"
    assert Scanner().classify(torch_shm).cause == "shm-exhausted"  # type: ignore[union-attr]


def test_pmix_lock_noise_on_a_run_that_worked_is_no_failure(tmp_path: Path) -> None:
    # openpmix/openpmix#1716: the program ran and printed; PMIx logged its lock's teardown
    log = write(
        tmp_path / "mpi.out",
        "[host:35779] PMIX ERROR: ERROR in file gds_ds12_lock_pthread.c at line 206",
        "Hello World",
    )
    assert explain([log]) == []


def test_a_watchdog_timeout_after_the_work_finished_is_still_a_failure(tmp_path: Path) -> None:
    # autocast-381 (tuning part): fit() ended, then rank 0 waited in a barrier the others
    # never joined until ProcessGroupNCCL's watchdog took the process down
    log = write(
        tmp_path / "job.out",
        "`Trainer.fit` stopped: `max_epochs=3` reached.",
        "[Rank 0] Watchdog caught collective operation timeout:",
        "  WorkNCCL(..., OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)",
    )
    root = explain([log])[0]
    assert root.cause == "finalization-abort" and "Watchdog caught" in root.evidence.text


def _explained(case_id: str) -> tuple[str, str]:
    folder = CORPUS / case_id
    if not folder.is_dir():
        pytest.skip(f"corpus case {case_id} not merged here")
    root = explain([str(p) for p in sorted(folder.iterdir()) if p.suffix in (".txt", ".log")])[0]
    return root.cause, root.evidence.text


def test_a_long_joined_line_shows_the_words_that_matched_not_its_start() -> None:
    # awsome-distributed-ai-192 (tuning part): a 613-character line, the poster's newlines
    # lost; NCCL's "Last error:" (socketStartConnect …) comes after 500 characters
    cause, evidence = _explained("awsome-distributed-ai-192-loopback-socket-ifname")
    assert cause == "network-unreachable"
    assert _key_line("awsome-distributed-ai-192-loopback-socket-ifname") in evidence


def test_a_message_wrapped_by_its_poster_is_shown_whole() -> None:
    # deepspeed-3916 (tuning part): torch's one-line error wrapped at 80 columns; the words
    # after the first line (the address and "Address already in use") are the evidence too
    cause, evidence = _explained("deepspeed-3916-srun-launchers-port-in-use")
    assert cause == "port-in-use"
    assert _key_line("deepspeed-3916-srun-launchers-port-in-use") in evidence
    assert "0.0.0.0:29600 (errno: 98 - Address already in use)" in evidence


def test_a_wrap_stops_at_the_next_record(tmp_path: Path) -> None:
    log = write(
        tmp_path / "w.log",
        "RuntimeError: The server socket has failed to listen on any local network address",
        "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500",
        "Traceback (most recent call last):",
    )
    assert explain([log])[0].evidence.text.endswith("any local network address")


@pytest.mark.parametrize(
    "prefix",
    [
        "3: ",
        " 12: ",
        "[default3]:",
        "[1,3]<stderr>:",
        "node-07: ",
        "10.0.0.12: ",
        "(RayWorker pid=4411) ",
        "2024-05-01T10:00:00.123Z ",
        "\x1b[31m",
        "0: [rank3]: ",
    ],
)
def test_a_launchers_prefix_does_not_hide_an_exception_line(prefix: str) -> None:
    # streamofsearch-5 (tuning part): the rank's own exception line, as srun --label, torchrun
    # --tee, mpirun --tag-output, pdsh, Ray, a container log or a colour terminal print it
    line = prefix + _key_line("streamofsearch-5-ddp-model-mismatch-across-ranks")
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "rank-crashed" and signature.generic
    quoted = prefix + '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/parallel/x.py"'
    assert Scanner().classify(quoted + ", line 3, in f: RuntimeError: boom") is None


def test_a_prefixed_exception_is_found_in_a_log_and_shown_without_colour(tmp_path: Path) -> None:
    log = write(
        tmp_path / "p.log",
        "0: Traceback (most recent call last):",
        '0:   File "train.py", line 9, in <module>',
        "0: \x1b[31mValueError: labels out of range\x1b[0m",
    )
    root = explain([log])[0]
    assert (
        root.cause == "rank-crashed" and root.evidence.text == "0: ValueError: labels out of range"
    )


def test_slurms_memory_limit_kill_names_the_job_and_its_use() -> None:
    # coquistt-2238 / bcbio-2393 (tuning part): slurmstepd's accounting kills the job over its
    # limit and says by how much; that line, not the short one after it, is the evidence
    for case_id in (
        "coquistt-2238-slurm-job-exceeded-memory-limit",
        "bcbio-2393-slurm-exceeded-memory-limit-host-prefix",
    ):
        cause, evidence = _explained(case_id)
        assert cause == "out-of-memory" and _key_line(case_id) in evidence


def test_a_cuda_kernel_fault_reported_by_the_watchdog_is_the_ranks_crash() -> None:
    cause, evidence = _explained("trellis2-90-illegal-memory-access-watchdog")
    assert cause == "rank-crashed" and "illegal memory access" in evidence
    # the same CUDA error words for memory, a GPU fault or a wrong device keep their cause
    scanner = Scanner()
    for line, expected in (
        ("RuntimeError: CUDA error: out of memory", "out-of-memory"),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu-fault"),
        ("RuntimeError: CUDA error: invalid device ordinal", "device-ordinal"),
    ):
        signature = scanner.classify(line)
        assert signature is not None and signature.cause == expected


# --- the fifth pass: how evidence is read, each from a tuning case of the corpus ---


def _log(case_id: str) -> Path:
    path = CORPUS / case_id / "log.txt"
    if not path.is_file():
        pytest.skip(f"corpus case {case_id} not merged here")
    return path


def _line_with(case_id: str, words: str) -> str:
    return next(line for line in _log(case_id).read_text().splitlines() if words in line)


def test_nccls_older_cudacheck_wording_is_memory() -> None:
    # NCCL < 2.19 prints CUDACHECK's WARN without the error number (nccl-1235, line 14)
    line = _line_with("nccl-1235-cuda-calloc-oom-large-llm", "Cuda failure 'out of memory'")
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "out-of-memory"


def test_an_nccl_warn_is_shown_with_its_callers_warn() -> None:
    # alloc.h's CUDACHECK WARN, then (two lines on, same thread) the caller's "Failed to CUDA
    # calloc": one record, both shown as the evidence
    findings = explain([str(_log("nccl-1235-cuda-calloc-oom-large-llm"))])
    text = findings[0].evidence.text
    assert findings[0].cause == "out-of-memory"
    assert "Cuda failure 'out of memory'" in text
    assert "Failed to CUDA calloc 6291456 bytes" in text


@pytest.mark.parametrize(
    ("case_id", "cause", "last_error"),
    [
        (
            "verl-726-link-local-socket-connect-abort",
            "network-unreachable",
            "Last error: socketStartConnect: Connect to 169.254.0.1<40815> failed",
        ),
        (
            "peft-1703-nccl-cuda-failure-out-of-memory",
            "out-of-memory",
            "Last error: Cuda failure 2 'out of memory'",
        ),
    ],
)
def test_torchs_nccl_exception_is_read_with_its_last_error(
    case_id: str, cause: str, last_error: str
) -> None:
    # "DistBackendError: NCCL error in: …", "ncclXxxError: …", "Last error:", NCCL's last WARN:
    # one message; its first line is the evidence, shown with what NCCL's WARN said
    scanner = Scanner()
    head = next(hit for hit in scanner.scan(_log(case_id)) if "DistBackendError" in hit.text)
    assert head.signature.cause == cause
    assert last_error in head.text


def test_faulthandlers_abort_is_the_consequence_of_the_device_assert_before_it() -> None:
    case = "litllama-306-device-assert-vocab-fatal-abort"
    signature = Scanner().classify(_line_with(case, "Fatal Python error: Aborted"))
    assert signature is not None and signature.tier is Tier.CONSEQUENCE
    findings = explain([str(_log(case))])
    assert findings[0].cause == "rank-crashed"
    assert "Assertion `srcIndex < srcSelectDimSize` failed." in findings[0].evidence.text


def test_torchelastics_root_cause_entry_beats_the_failures_listed_before_it(
    tmp_path: Path,
) -> None:
    # ChildFailedError's layout (elastic/multiprocessing/errors): "Failures:" first, then the
    # "Root Cause (first observed failure):" entry; both in one second here (the entries as
    # cppo-6's log prints them, a second one added)
    def entry(index: int, rank: int, pid: int) -> list[str]:
        return [
            f"[{index}]:",
            "  time      : 2025-05-21_15:43:03",
            "  host      : worker-0",
            f"  rank      : {rank} (local_rank: {rank})",
            f"  exitcode  : 1 (pid: {pid})",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/"
            "errors.html",
        ]

    summary = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        "train.py FAILED",
        "-" * 60,
        "Failures:",
        *entry(1, 1, 14751),
        "-" * 60,
        "Root Cause (first observed failure):",
        *entry(0, 0, 14750),
        "=" * 60,
    ]
    findings = explain([write(tmp_path / "agent.log", *summary)])
    assert findings[0].evidence.text.strip() == "exitcode  : 1 (pid: 14750)"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # no tuning case holds these yet: each is its source's format string, filled in
        # the kernel's OOM killer before Linux 4.19 (mm/oom_kill.c), and for a memory cgroup
        ("Out of memory: Kill process 4541 (python) score 912 or sacrifice child", "out-of-memory"),
        (
            "Memory cgroup out of memory: Kill process 4541 (python) score 990 or sacrifice child",
            "out-of-memory",
        ),
        # NCCL (src/init.cc, bootstrap): ranks on different NCCL builds
        (
            "node2:811:811 [0] NCCL WARN Mismatched NCCL version detected : rank 0 version 21803 "
            "rank 8 version 21903",
            "version-mismatch",
        ),
        # NCCL >= 2.26's wording of a duplicate GPU (src/init.cc)
        (
            "node1:3120:3120 [1] NCCL WARN Multiple Ranks are using the same GPU/Partition. Set "
            "NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this",
            "duplicate-gpu",
        ),
        # torch <= 1.10's TCPStore client giving up after retrying refused connects for its whole
        # timeout (the master's store never came up in time), and torchelastic's wrapper of a
        # store error
        ("RuntimeError: connect() timed out. Original timeout was 60000 ms.", "rendezvous-timeout"),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection "
            "to the C10d store has failed. See inner exception for details.",
            "connection-refused",
        ),
        # the kubelet's eviction manager evicting a pod
        (
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 88Mi.",
            "out-of-memory",
        ),
        ("The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi", "disk-full"),
        # nccl-tests (src/common.h NCCLCHECK)
        (
            " Test NCCL failure all_reduce.cu:44 'unhandled system error (run with NCCL_DEBUG=INFO "
            "for details) / '",
            "network-unreachable",
        ),
        # torch's CUDA init and its extension builder
        (
            "RuntimeError: The NVIDIA driver on your system is too old (found version 10010).",
            "version-mismatch",
        ),
        (
            "RuntimeError: The detected CUDA version (11.8) mismatches the version that was used "
            "to compile PyTorch (12.1). Please make sure to use the same CUDA versions.",
            "version-mismatch",
        ),
        # mpirun's report of a rank's signal (Open MPI / PRRTE help text)
        (
            "mpirun noticed that process rank 3 with PID 1234 on node n2 exited on signal 9 "
            "(Killed).",
            "rank-crashed",
        ),
        # torch.multiprocessing.spawn's report of a non-zero exit (a launcher's report)
        (
            "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit "
            "code 1",
            "rank-crashed",
        ),
        # Open MPI's mpirun after a rank's non-zero exit (help-errmgr-base.txt)
        (
            "Primary job  terminated normally, but 1 process returned a non-zero exit code. Per "
            "user-direction, the job has been aborted.",
            "rank-crashed",
        ),
        # torch < 1.6's wording of ncclSystemError (ProcessGroupNCCL)
        ("RuntimeError: NCCL Error 2: unhandled system error", "network-unreachable"),
        # CUDACHECK inside NCCL meeting the rank's own kernel fault
        (
            "node1:3120:3200 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'an illegal memory access "
            "was encountered'",
            "rank-crashed",
        ),
        # torch's DataLoader on a worker's SIGSEGV (torch/utils/data/_utils/signal_handling)
        ("ERROR: Unexpected segmentation fault encountered in worker.", "rank-crashed"),
        # NCCL's socket transport (transport/net_socket.cc) and name lookups (misc/socket.cc)
        ("node1:3120:3200 [0] NCCL WARN NET/Socket : no interface found", "network-unreachable"),
        (
            "node1:3120:3200 [0] NCCL WARN Net : error encountered when getting address info : "
            "Name or service not known",
            "connection-refused",
        ),
    ],
)
def test_messages_read_from_their_sources(line: str, cause: str) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == cause


def test_deepspeeds_launcher_report_is_a_failure() -> None:
    # launch.py's sigkill_handler: "[ERROR] [launch.py:434:sigkill_handler] [cmd…] exits with
    # return code = -9" (deepspeed-3232): a launcher's report of a rank that died, not "unknown"
    line = _line_with("deepspeed-3232-launcher-exits-return-code-9", "exits with return code")
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "rank-crashed" and signature.run_failed


@pytest.mark.parametrize(
    "line",
    [
        # rdma-core (libibverbs/dynamic_driver.c) on a node without that vendor's NIC
        "libibverbs: Warning: couldn't load driver 'libmlx4-rdmav34.so': libmlx4-rdmav34.so: "
        "cannot open shared object file: No such file or directory",
        # c10d's client trying the master's IPv6 address first (socket.cpp), then the next one
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 99 - Cannot assign requested address).",
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node1]:29500 "
        "(errno: 22 - Invalid argument).",
        # Python's warnings module ("file:line: Category: message"), with error words in it
        "/opt/conda/lib/python3.10/site-packages/torch/cuda/__init__.py:173: UserWarning: Error "
        "detecting the CUDA device capability",
        # wandb's system monitor; glibc's loader skipping an LD_PRELOAD library; git in a copy
        "wandb: ERROR Failed to sample metric: Not Supported",
        "ERROR: ld.so: object '/usr/lib/libtcmalloc.so' from LD_PRELOAD cannot be preloaded "
        "(cannot open shared object file): ignored.",
        "fatal: not a git repository (or any of the parent directories): .git",
        # Slurm's survivable error lines (jobacct_gather, srun without a tty, TMPDIR, x11)
        "slurmstepd: error: _is_a_lwp: open() /proc/24097/status failed: No such file or directory",
        "srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device",
        "slurmstepd: error: Unable to create TMPDIR [/tmp/user/1234]: Permission denied",
        "srun: error: spank: x11.so: Plugin x11 failed to initialize.",
        "Error in atexit._run_exitfuncs:",
    ],
)
def test_noise_of_healthy_runs_is_a_warning(line: str) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and signature.tier is Tier.WARNING


def test_pythons_warnings_in_a_corpus_log_are_warnings() -> None:
    # knet-30's multiprocessing warning at exit ("…semaphore_tracker.py:144: UserWarning: …")
    line = _line_with("knet-30-slurm-cgroup-oom-kill-4-tasks", "UserWarning:")
    signature = Scanner().classify(line)
    assert signature is not None and signature.tier is Tier.WARNING


def test_nccl_info_lines_are_never_a_failure() -> None:
    # NCCL's bootstrap retry (misc/socket.cc) at INFO level: "retrying", not a failure
    line = "node1:3120:3200 [0] NCCL INFO Call to connect returned Connection refused, retrying"
    assert Scanner().classify(line) is None


def test_a_c10d_connect_warning_that_retries_is_weak() -> None:
    # llamafactory-3715: warning-level, errno 110 (the address never answered): a retry, weak
    line = _line_with("llamafactory-3715-placeholder-master-addr", "failed to connect")
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "connection-refused"
    assert signature.tier is Tier.WEAK


def test_an_exception_in_an_exit_handler_is_no_failure(tmp_path: Path) -> None:
    # CPython's atexit module prints the handler's traceback under this header and exits
    log = write(
        tmp_path / "exit.log",
        "epoch 3 loss 0.1",
        "Error in atexit._run_exitfuncs:",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/wandb/sdk/wandb_run.py", line 2291, '
        "in _atexit_cleanup",
        "    self._on_finish()",
        "ConnectionResetError: [Errno 104] Connection reset by peer",
    )
    assert explain([log]) == []


def test_libibverbs_missing_provider_in_a_corpus_log_is_a_warning() -> None:
    # nccl-1044: rdma-core's warning for a provider library the node has no NIC for
    line = _line_with("nccl-1044-healthy-libibverbs-driver-warning", "libibverbs: Warning")
    signature = Scanner().classify(line)
    assert signature is not None and signature.tier is Tier.WARNING


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # c10d's server socket (socket.cpp: "The server socket has failed to bind to {}:{} (errno:
        # {} - {})"): an address that is not this host's (EADDRNOTAVAIL), and libuv's TCPStore
        # ("… port: {}, useIpv6: {}, code: {}, name: {}, message: {}"): MASTER_ADDR names
        # another node than the one serving the store
        (
            "[W socket.cpp:436] [c10d] The server socket has failed to bind to 10.1.2.3:29500 "
            "(errno: 99 - Cannot assign requested address).",
            "connection-refused",
        ),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. "
            "The server socket has failed to bind to [node-7]:29500 (errno: 99 - Cannot assign "
            "requested address).",
            "connection-refused",
        ),
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            "local network address. port: 29500, useIpv6: false, code: -99, name: EADDRNOTAVAIL, "
            "message: cannot assign requested address",
            "connection-refused",
        ),
        # the same listen failure with the port taken stays a port in use
        (
            "RuntimeError: The server socket has failed to listen on any local network address. "
            "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in "
            "use). The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address "
            "already in use).",
            "port-in-use",
        ),
        # NCCL's verbs wrapper (misc/ibvwrap.cc: "Call to ibv_reg_mr failed with error %s") and
        # its queue creation: ENOMEM from RDMA is the locked-memory limit (NCCL's
        # troubleshooting guide: "remove the user limits on registering pinned memory")
        (
            "node3:4410:4502 [2] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr failed with "
            "error Cannot allocate memory",
            "memlock-limit",
        ),
        (
            "node3:4410:4502 [2] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with "
            "error Cannot allocate memory",
            "memlock-limit",
        ),
        # the CUDA runtime's cudaGetErrorString texts for cudaErrorNoDevice (100) and
        # cudaErrorDevicesUnavailable (46), and nvidia-smi on a node with no GPU for the job
        ("RuntimeError: CUDA error: no CUDA-capable device is detected", "gpu-unavailable"),
        (
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            "gpu-unavailable",
        ),
        ("No devices were found", "gpu-unavailable"),
        # torch's own texts for a node without a usable GPU or driver
        (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
            "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
            "gpu-unavailable",
        ),
        (
            "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.",
            "gpu-unavailable",
        ),
        (
            "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
            "gpu-unavailable",
        ),
        # a torch build without CUDA or without NCCL
        ("AssertionError: Torch not compiled with CUDA enabled", "version-mismatch"),
        ("RuntimeError: Distributed package doesn't have NCCL built in", "version-mismatch"),
    ],
)
def test_messages_of_the_sixth_pass_read_from_their_sources(line: str, cause: str) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == cause and signature.tier is Tier.ROOT


def test_a_host_without_ipv6_failing_to_bind_it_is_noise() -> None:
    # c10d tries [::] first and then 0.0.0.0: EAFNOSUPPORT or EADDRNOTAVAIL on [::] is no failure
    for errno in (
        "97 - Address family not supported by protocol",
        "99 - Cannot assign requested address",
    ):
        line = (
            "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 "
            f"(errno: {errno})."
        )
        signature = Scanner().classify(line)
        assert signature is not None and signature.tier is Tier.WARNING


def test_an_rdma_registration_error_other_than_enomem_is_no_memlock_finding() -> None:
    # "Bad address"/"Invalid argument" from ibv_reg_mr are GPUDirect/ATS set-up, not the limit
    line = (
        "node3:4410:4502 [2] misc/ibvwrap.cc:153 NCCL WARN Call to ibv_reg_mr failed with error "
        "Bad address"
    )
    signature = Scanner().classify(line)
    assert signature is None or signature.cause != "memlock-limit"


def test_ibv_enomem_is_the_memlock_limit_not_host_memory(tmp_path: Path) -> None:
    log = write(
        tmp_path / "ib.log",
        "node3:4410:4502 [2] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr failed with error "
        "Cannot allocate memory",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.21.5",
    )
    causes = [f.cause for f in explain([log])]
    assert causes and causes[0] == "memlock-limit"


def test_a_store_timeout_whose_retries_never_got_an_answer_is_the_address(tmp_path: Path) -> None:
    # c10d's client (socket.cpp) retries refused connects silently and warns for connects that
    # timed out; the final "timed out after Ns" alone is a master that came late
    # (xtuner-438), after errno-110 retries (llamafactory-3715's line) the address never answered
    timeout = _key_line("xtuner-438-store-timeout-slow-data-load")
    late = write(tmp_path / "late.log", timeout)
    assert [f.cause for f in explain([late])][:1] == ["rendezvous-timeout"]
    retry = _key_line("llamafactory-3715-placeholder-master-addr")
    wrong = write(tmp_path / "wrong.log", f"[W socket.cpp:663] [c10d] {retry}", timeout)
    root = explain([wrong])[0]
    assert root.cause == "connection-refused" and root.evidence.line == 1
    # torch >= 2.2 words the same retry "The server socket on … has timed out, will retry."
    newer = (
        "[W1122 10:20:05.123456 socket.cpp:611] [c10d] The server socket on [10.0.0.1]:29500 "
        "has timed out, will retry."
    )
    signature = Scanner().classify(newer)
    assert signature is not None and signature.cause == "connection-refused"
    assert signature.tier is Tier.WEAK


@pytest.mark.parametrize(
    ("line", "cause", "tier"),
    [
        # torch.save's zip writer (caffe2/serialize/inline_container.cc): miniz's short-write
        # error, then the position check of the next write
        (
            "RuntimeError: [enforce fail at inline_container.cc:588] . PytorchStreamWriter "
            "failed writing file data/12: file write failed",
            "disk-full",
            Tier.ROOT,
        ),
        (
            "RuntimeError: [enforce fail at inline_container.cc:664] . unexpected pos 56833600 "
            "vs 56833492",
            "disk-full",
            Tier.ROOT,
        ),
        # Hugging Face datasets' builder.py before a download
        (
            "OSError: Not enough disk space. Needed: 134.92 GiB (download: 41.97 GiB, generated: "
            "92.95 GiB, post-processed: Unknown size)",
            "disk-full",
            Tier.ROOT,
        ),
        # slurm_strerror texts (common/slurm_errno.c)
        (
            "srun: error: Unable to create step for job 77: Job killed due node failure",
            "node-failure",
            Tier.ROOT,
        ),
        (
            "srun: error: Unable to create step for job 77: Job killed due hitting max wall "
            "clock limit",
            "time-limit",
            Tier.ROOT,
        ),
        # slurmstepd (req.c): a cancel that sent a signal; a step ended after a task failed
        (
            "slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE to SIGNAL "
            "Terminated ***",
            "interrupted",
            Tier.CONSEQUENCE,
        ),
        (
            "slurmstepd: error: *** STEP 77.0 ON n1 FAILED (non-zero exit code or other failure "
            "mode) ***",
            "rank-crashed",
            Tier.CONSEQUENCE,
        ),
        # memory: torch >= 2.1's CPU allocator (alloc_cpu.cpp), ROCm's allocator, cuBLAS
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not "
            "enough memory: you tried to allocate 1073741824 bytes.",
            "out-of-memory",
            Tier.ROOT,
        ),
        (
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB",
            "out-of-memory",
            Tier.ROOT,
        ),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`",
            "out-of-memory",
            Tier.ROOT,
        ),
        # the GPU itself: a GSP timeout Xid, CUDA's cudaErrorNvlinkUncorrectable, the driver
        (
            "NVRM: Xid (PCI:0000:3b:00): 119, pid=1234, name=python, Timeout after 6s of waiting "
            "for RPC response from GPU0 GSP!",
            "gpu-fault",
            Tier.ROOT,
        ),
        (
            "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
            "gpu-fault",
            Tier.ROOT,
        ),
        ("NVRM: RmInitAdapter failed! (0x26:0xffff:1601)", "gpu-fault", Tier.ROOT),
        # cudaErrorSystemNotReady: NVSwitch fabric manager not running
        ("RuntimeError: CUDA error: system not yet initialized", "gpu-unavailable", Tier.ROOT),
        # srun (api/step_launch.c) losing a node's slurmstepd
        (
            "srun: error: step_launch_notify_io_failure: aborting, io error with slurmstepd on "
            "node 3",
            "node-failure",
            Tier.ROOT,
        ),
        ("srun: error: Aborting, can not test connection to node 1.", "node-failure", Tier.ROOT),
        # gloo (transport/tcp/pair.cc): a peer sent more bytes than this rank posted
        (
            "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
            "op.preamble.length <= op.nbytes. 8773632 vs 8386560",
            "collective-deadlock",
            Tier.ROOT,
        ),
        (
            "RuntimeError: [enforce fail at gloo/transport/tcp/pair.cc:380] op.preamble.length <= "
            "op.nbytes. 4096 vs 8. Received data size doesn't match expected size. Is there a "
            "distributed collective mismatch in your code?",
            "collective-deadlock",
            Tier.ROOT,
        ),
    ],
)
def test_messages_of_the_seventh_pass_read_from_their_sources(
    line: str, cause: str, tier: Tier
) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and (signature.cause, signature.tier) == (cause, tier)


@pytest.mark.parametrize(
    "line",
    [
        # ProcessGroupNCCL (NCCLUtils) after its watchdog or a failure aborted the communicator
        "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1.",
        # TCPStore's client when the store's process (rank 0) went away while it waited
        "RuntimeError: Stop_waiting response is expected",
        # elastic's dynamic rendezvous closed by another node's agent
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
        # gloo's monitoredBarrier naming the rank it lost (ProcessGroupGloo.cpp)
        "[E ProcessGroupGloo.cpp:138] Rank 0 successfully reached monitoredBarrier, but received "
        "errors while waiting for send/recv from rank 1. Please check rank 1 logs for faulty rank.",
        # gloo (transport/tcp/pair.cc) on a read that failed other than by EOF
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
        "[10.0.0.2]:41234: Connection timed out. This is typically caused by a remote worker "
        "hanging or bugs in the application. Check the logs of the remote worker before "
        "reporting an error.",
    ],
)
def test_what_survivors_raise_is_a_consequence(line: str, tmp_path: Path) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "rank-crashed"
    assert signature.tier is Tier.CONSEQUENCE
    # printed first, it still yields to the failing rank's own exception after it
    log = write(tmp_path / "r.log", line, "ValueError: batch 17 has no labels")
    root = explain([log])[0]
    assert root.evidence.line == 2


@pytest.mark.parametrize(
    "line",
    [
        # torchelastic's agent (elastic/agent/server/api.py, its format strings) once every
        # local worker exited 0; deepspeed's launcher (launcher/launch.py) per worker
        "I0310 12:00:01.000000 4242 torch/distributed/elastic/agent/server/api.py:879] [default] "
        "worker group successfully finished. Waiting 300 seconds for other agents to finish.",
        "I0310 12:00:01.000000 4242 torch/distributed/elastic/agent/server/api.py:932] Local "
        "worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents "
        "to finish",
        "[2024-03-10 12:00:01,000] [INFO] [launch.py:351:main] Process 4243 exits successfully.",
        # transformers' Trainer.train() closing log (transformers-11796's line), Megatron-LM's
        # pretrain() after its loop (training.py print_datetime)
        _line_with("transformers-11796-healthy-16-node-trainer", "'train_runtime'"),
        "[after training is done] datetime: 2024-03-10 12:00:01 ",
    ],
)
def test_a_launchers_word_that_the_workers_succeeded_is_a_finished_run(
    line: str, tmp_path: Path
) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and signature.cause == "finished"
    # benign connect retries before it (c10d's warning, llamafactory-3715's wording) stay noise
    retry = "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node1]:29500 "
    log = write(tmp_path / "ok.log", retry + "(errno: 111 - Connection refused).", line)
    assert explain([log]) == []


def test_a_connect_retry_before_nccl_formed_the_group_is_no_failure(tmp_path: Path) -> None:
    # c10d retries while the master starts; NCCL's "Init COMPLETE" of a communicator of several
    # ranks (lightning-1637's line) says every rank connected: the retry was benign
    retry = (
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node1]:29500 "
        "(errno: 111 - Connection refused)."
    )
    init = _line_with("lightning-1637-spawn-weights-loaded-on-every-node", "Init COMPLETE")
    alone = write(tmp_path / "retry.log", retry, "epoch 1 step 10 loss 0.52")
    assert [f.cause for f in explain([alone])] == ["connection-refused"]
    formed = write(tmp_path / "formed.log", retry, init, "epoch 1 step 10 loss 0.52")
    assert explain([formed]) == []
    # a launcher-less start forms communicators of one rank: no such proof
    single = init.replace("nranks 8", "nranks 1")
    assert explain([write(tmp_path / "one.log", retry, single)])[0].cause == "connection-refused"


# NCCL's WARN texts (src/ of NVIDIA/nccl, their format strings filled in): newer IB completion
# and async-event wordings, its socket layer giving up on an address, its own configuration
# checks, host allocations, the driver check, the socket transport's size check
@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "node1:1:1 [0] transport/net_ib/p2p.cc:688 NCCL WARN NET/IB: Got completion from "
            "peer 10.0.0.2<4567> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) "
            "vendor_err=129 localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2 hca mlx5_0",
            "network-unreachable",
        ),
        (
            "node1:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: connect to "
            "172.17.0.1<45679> returned Connection refused, exceeded error retry count after "
            "35 attempts",
            "network-unreachable",
        ),
        (
            "node1:1:1 [0] transport/net_ib/init.cc:120 NCCL WARN NET/IB : mlx5_0:1 async "
            "fatal event: local catastrophic error",
            "link-fault",
        ),
        (
            "node1:1:1 [0] transport/net_ib.cc:900 NCCL WARN NET/IB : Attempted to connect "
            "incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_1:1/RoCE. Try selecting NICs "
            "of only one link type using NCCL_IB_HCA",
            "nccl-config",
        ),
        (
            "node1:1:1 [0] init.cc:300 NCCL WARN Detected mixed local Net device counts "
            "across ranks (min 4, max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to ignore this check",
            "nccl-config",
        ),
        (
            "node1:1:1 [0] NCCL WARN Failed to CUDA host alloc 4194304 bytes",
            "out-of-memory",
        ),
        (
            "node1:1:1 [0] init.cc:200 NCCL WARN CUDA Driver version found is 11040. Minimum "
            "requirement is 11080",
            "version-mismatch",
        ),
        (
            "node1:1:1 [0] transport/net_socket.cc:636 NCCL WARN NET/Socket : peer "
            "10.0.0.2<44125> message truncated : receiving 1048576 bytes instead of 65536. "
            "If you believe your socket network is in a healthy state, there may be a "
            "mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, "
            "NCCL_ALGO) between ranks",
            "collective-deadlock",
        ),
        (
            "node1:1:1 [0] NCCL WARN MNNVL (cliqueSize 72) is available but not working on "
            "this system. Check the IMEX channel configuration "
            "(/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue.",
            "nccl-config",
        ),
    ],
)
def test_nccl_warn_texts_read_from_the_nccl_source(line: str, cause: str) -> None:
    signature = Scanner().classify(line)
    assert signature is not None and (signature.cause, signature.tier) == (cause, Tier.ROOT)


def test_a_cuda_call_after_the_runtime_unloaded_is_an_exit_failure(tmp_path: Path) -> None:
    # CUDA's cudaErrorCudartUnloading ("driver shutting down"): a call at process exit, after
    # the runtime was unloaded (ProcessGroupNCCL's watchdog, a destructor)
    line = (
        "[E ProcessGroupNCCL.cpp:455] [Rank 1] NCCL watchdog thread terminated with exception: "
        "CUDA error: driver shutting down"
    )
    log = write(tmp_path / "exit.log", line)
    assert explain([log])[0].cause == "finalization-abort"
    # after an error of its own it is not the cause (findings.Ranker)
    crashed = write(tmp_path / "crash.log", "ValueError: batch 17 has no labels", line)
    assert explain([crashed])[0].cause == "rank-crashed"


def test_sigint_from_outside_is_an_interrupt_and_sigterm_stays_a_consequence(
    tmp_path: Path,
) -> None:
    # Python's KeyboardInterrupt and torchelastic's agent (elastic/multiprocessing/api.py:
    # "Process N got signal: 2"; agent/server/api.py: "Received 2 death signal") after Ctrl-C
    ctrl_c = write(
        tmp_path / "ctrl_c.log",
        "epoch 1 step 40 loss 0.7",
        "Traceback (most recent call last):",
        "KeyboardInterrupt",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 17941 got "
        "signal: 2",
    )
    assert [f.cause for f in explain([ctrl_c])][:1] == ["interrupted"]
    # a rank's own error before the interrupt stays the cause
    crashed = write(
        tmp_path / "crash.log", "ValueError: batch 17 has no labels", "KeyboardInterrupt"
    )
    assert explain([crashed])[0].cause == "rank-crashed"
    # SIGTERM to the agent may be srun stopping the step after another task failed (the
    # project's run_hang fixture's agent line): no interrupt of its own
    sigterm = (
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 17941 got "
        "signal: 15"
    )
    signature = Scanner().classify(sigterm)
    assert signature is not None and signature.cause == "rank-crashed"


def test_an_agent_stopped_with_sigterm_is_said_only_when_nothing_else_failed(
    tmp_path: Path,
) -> None:
    # the project's run_hang fixture's agent line (torchelastic agent/server/api.py)
    agent = (
        "W1122 10:36:45.345000 17941 torch/distributed/elastic/agent/server/api.py:753] "
        "Received 15 death signal, shutting down workers"
    )
    alone = write(tmp_path / "agent.log", "epoch 3 step 900 loss 0.2", agent)
    assert [f.cause for f in explain([alone])] == ["interrupted"]
    crashed = write(tmp_path / "crash.log", "ValueError: batch 17 has no labels", agent)
    assert [f.cause for f in explain([crashed])] == ["rank-crashed"]


def test_an_interrupt_before_a_resume_that_finished_is_no_failure(tmp_path: Path) -> None:
    # a first attempt stopped (Ctrl-C, or SIGTERM for a requeue), then the run resumed and
    # finished (transformers-11796's closing line): neither is a report that the run failed
    done = _line_with("transformers-11796-healthy-16-node-trainer", "'train_runtime'")
    for stop in (
        "KeyboardInterrupt",
        "W1122 10:36:45.345000 17941 torch/distributed/elastic/agent/server/api.py:753] "
        "Received 15 death signal, shutting down workers",
    ):
        log = write(tmp_path / "resumed.log", "epoch 1", stop, "resuming from step 40", done)
        assert explain([log]) == []


def test_gpus_that_cannot_map_each_others_memory_are_an_nccl_setting(tmp_path: Path) -> None:
    # CUDA's cudaErrorPeerAccessUnsupported in NCCL's CUDACHECK WARN and in torch's exception
    # with its "Last error:" line (c10d NCCLUtils)
    warn = (
        "node1:3120:3200 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not "
        "supported between these two devices'"
    )
    signature = Scanner().classify(warn)
    assert signature is not None and signature.cause == "nccl-config"
    log = write(
        tmp_path / "p2p.log",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.21.5",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 'peer access is not supported between these two devices'",
    )
    assert explain([log])[0].cause == "nccl-config"


def test_a_time_limit_after_the_work_finished_is_a_hang_at_exit(tmp_path: Path) -> None:
    # megatronbridge-1656: Megatron-LM's "[after training is done]", then slurmstepd cancels the
    # step at the time limit 8 minutes later: the job ended TIMEOUT, the work had finished
    done = _line_with("megatronbridge-1656-hang-at-exit-until-time-limit", "after training is done")
    limit = _key_line("megatronbridge-1656-hang-at-exit-until-time-limit")
    log = write(tmp_path / "exit.log", done, limit)
    root = explain([log])[0]
    assert root.cause == "finalization-abort" and root.evidence.line == 2
    # the time limit alone (no sign of finished work) stays the cause
    assert explain([write(tmp_path / "limit.log", limit)])[0].cause == "time-limit"


def test_paramiko_refusing_a_remote_launch_is_ssh_not_unknown(tmp_path: Path) -> None:
    # colossalai-3066 (tuning part): colossalai run starts the other node's torchrun over ssh
    # with fabric; its multinode_runner prints "Error: failed to run … exception: <paramiko>"
    line = _line_with("colossalai-3066-ssh-no-authentication-methods", "exception:")
    root = explain([write(tmp_path / "launch.log", line)])[0]
    assert root.cause == "ssh-unreachable" and "No authentication methods" in root.evidence.text
    # the remote command itself failing (invoke's UnexpectedExit) is no ssh problem
    ran = line.replace(
        "No authentication methods available", "Encountered a bad command exit code!"
    )
    assert explain([write(tmp_path / "ran.log", ran)])[0].cause != "ssh-unreachable"


def test_a_path_another_rank_created_first_is_a_shared_storage_race(tmp_path: Path) -> None:
    # dle-1092 (tuning part): every node's local rank 0 saved the checkpoint and its "last"
    # link in one shared directory; the exception is EEXIST, not a crash of its own
    cause, evidence = _explained("dle-1092-tacotron2-multinode-checkpoint-symlink-race")
    assert cause == "storage-missing" and "[Errno 17] File exists" in evidence
    log = write(tmp_path / "ok.log", "os.makedirs(path, exist_ok=True)  # FileExistsError avoided")
    assert explain([log]) == []


def test_a_store_timeout_to_a_host_local_address_is_the_network(tmp_path: Path) -> None:
    # openrlhf-265 (tuning part): the vLLM group's master address was 172.17.0.2, a container
    # on Docker's default bridge; the other node's connect timed out after 1800 s
    cause, evidence = _explained("openrlhf-265-vllm-group-connect-to-docker-bridge-ip")
    assert cause == "network-unreachable"
    assert _key_line("openrlhf-265-vllm-group-connect-to-docker-bridge-ip") in evidence
    timeout = (
        "[E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to "
        "connect to ({}, 44737)."
    )
    for address, expected in (
        ("169.254.0.1", "network-unreachable"),  # link-local (RFC 3927)
        ("[fe80::1%eth0]", "network-unreachable"),  # IPv6 link-local (RFC 4291), bracketed
        ("10.0.1.75", "rendezvous-timeout"),  # routable: a master that came late
        ("node-0", "rendezvous-timeout"),  # a host name says nothing
    ):
        log = write(tmp_path / "t.log", timeout.format(address))
        assert explain([log])[0].cause == expected, address


def test_nccls_topology_lookups_failing_are_its_internal_error() -> None:
    # src/graph/topo.h: ncclTopoIdToNetDev (nemo-13996, tuning part), ncclTopoRankToIndex and
    # ncclTopoDevToRank WARN, then return ncclInternalError; the format strings' other two
    for line in (
        "node7:4121:4190 [3] graph/topo.h:120 NCCL WARN ncclTopoRankToIndex could not find rank 9",
        "node7:4121:4190 [3] graph/topo.h:133 NCCL WARN ncclTopoDevToRank could not find rank for "
        "nvml dev 3 in systemId 1",
    ):
        signature = Scanner().classify(line)
        assert signature is not None and signature.cause == "nccl-version-bug"
    # search.cc's fallback is NCCL going on (a warning), not this
    fallback = "graph/search.cc:1135 NCCL WARN Could not find a path for pattern 1, falling back"
    signature = Scanner().classify(fallback)
    assert signature is None or signature.cause != "nccl-version-bug"


def test_rays_memory_monitor_killing_a_worker_is_memory() -> None:
    # openrlhf-936 (tuning part) is the line above; Ray's other wordings of the same kill, from
    # its source and docs: Ray >= 2.55 counts the workers, the node's figures follow on the next
    # line, the GCS logs the worker's exit type
    for line in (
        "(raylet) 2 worker(s) were killed due to the node running low on memory.",
        "Memory on the node (IP: 10.0.62.231, ID: e5d9) where the task (task ID: 4353, "
        "name=allocate_memory, pid=11362, memory used=1.25GB) was running was 27.71GB / 28.80GB "
        "(0.962273), which exceeds the memory usage threshold of 0.95.",
        "[2023-05-27 13:36:07,742 W 114781 114781] (gcs_server) gcs_worker_manager.cc:55: "
        "Reporting worker exit, worker id = 1c42, node id = ffff, address = , "
        "exit_type = NODE_OUT_OF_MEMORY, exit_detail = see the raylet",
    ):
        signature = Scanner().classify(line)
        assert signature is not None and signature.cause == "out-of-memory", line
    # a task that merely reports its own memory use is no kill
    assert Scanner().classify("task used 1.2GB of memory on the node") is None


def test_mpichs_bad_termination_block_is_a_failed_rank_not_a_healthy_run(
    tmp_path: Path,
) -> None:
    # mplbm-92 (tuning part): MPICH's mpiexec (Hydra) ends the job with its "=" block; older
    # Hydra says "EXIT CODE: 9" for a SIGKILLed process. The log holds nothing else: before
    # this pass explain called it healthy
    cause, evidence = _explained("mplbm-92-mpich-bad-termination-exit-code-9")
    assert cause == "rank-crashed" and "EXIT CODE: 9" in evidence
    # newer Hydra names the signal; a rank's own error before the block is the cause, the
    # block only the launcher's report of it
    block = (
        "=" * 83,
        "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
        "=   RANK 1 PID 5491 RUNNING AT gn59",
        "=   KILLED BY SIGNAL: 9 (Killed)",
        "=" * 83,
    )
    root = explain([write(tmp_path / "signal.log", *block)])[0]
    assert root.cause == "rank-crashed" and "KILLED BY SIGNAL: 9" in root.evidence.text
    before = ("RuntimeError: CUDA error: out of memory",)
    root = explain([write(tmp_path / "oom.log", *before, *block)])[0]
    assert root.cause == "out-of-memory"
    # the words alone, outside Hydra's block, are no report
    quiet = write(tmp_path / "ok.log", "epoch 3 EXIT CODE: 9 would mean SIGKILL in MPICH")
    assert explain([quiet]) == []


def test_a_ray_worker_that_died_is_a_consequence_of_why_it_died(tmp_path: Path) -> None:
    # Ray's own texts (python/ray/exceptions.py ActorDiedError, the core worker's system-error
    # report; no tuning case holds them yet): the caller's view of a worker's death
    died = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    signature = Scanner().classify(died)
    assert signature is not None and signature.cause == "rank-crashed"
    assert signature.tier is Tier.CONSEQUENCE
    # the dead worker's own exception, earlier in the log, is the cause
    log = write(
        tmp_path / "ray.log",
        "(WorkerDict pid=866, ip=10.233.115.77) FileNotFoundError: [Errno 2] No such file or "
        "directory: '/data/ckpt/global_step_40/actor'",
        "(main_task pid=5634) " + died,
    )
    assert explain([log])[0].cause == "storage-missing"
    # with Ray's exit detail naming its memory monitor, the same report is memory
    oom = (
        "WARNING worker.py:1839 -- A worker died or was killed while executing a task by an "
        "unexpected system error. Worker exit type: SYSTEM_ERROR Worker exit detail: Task was "
        "killed due to the node running low on memory."
    )
    signature = Scanner().classify(oom)
    assert signature is not None and signature.cause == "out-of-memory"


def test_gloos_full_mesh_connect_failing_is_the_network(tmp_path: Path) -> None:
    # sglang-3226 (tuning part) is the line above; pair.cc's other wordings: the connect that
    # timed out (awsdoeks-69, tuning part, as the PR wraps it: read as one message) and older
    # gloo's "connect [ADDR]:PORT: Connection refused"
    cause, evidence = _explained("awsdoeks-69-gloo-loopback-then-ray-actor-handle")
    assert cause == "network-unreachable"
    assert "pair.cc:152] timed out connecting: SO_ERROR: Connection refused" in evidence
    older = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
        "[10.36.193.84]:1927: Connection refused"
    )
    root = explain([write(tmp_path / "old.log", older)])[0]
    assert root.cause == "network-unreachable"
    assert "Gloo's ranks could not connect" in root.summary  # a routable peer: no loopback
    # a peer that went away while the mesh connected is a consequence of why it went
    reset = "[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with Connection reset by peer"
    signature = Scanner().classify(reset)
    assert signature is not None and signature.tier is Tier.CONSEQUENCE


def test_a_gloo_peer_on_loopback_names_torchs_fallback_warning(tmp_path: Path) -> None:
    # awsdoeks-50 (tuning part): under hostNetwork the hostname resolved to nothing usable,
    # Gloo bound 127.0.0.1, rank 8 on the other node dialled its own loopback
    cause, evidence = _explained("awsdoeks-50-gloo-hostname-loopback-fallback")
    assert cause == "network-unreachable"
    assert "Unable to resolve hostname to a (local) address. Using the loopback" in evidence
    root = explain([str(CORPUS / "awsdoeks-50-gloo-hostname-loopback-fallback" / "log.txt")])[0]
    assert "loopback" in root.summary and "127.0.0.1" in root.summary
    # the warning alone (one node: loopback works there) is no failure
    single = write(
        tmp_path / "one-node.log",
        "[rank0]:[W427 03:10:15.652192062 ProcessGroupGloo.cpp:715] Warning: Unable to resolve "
        "hostname to a (local) address. Using the loopback address as fallback. Manually set "
        "the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())",
        "epoch 1 loss 0.25",
    )
    assert explain([single]) == []


def test_a_wrapped_message_is_read_whole_but_not_a_tracebacks_code(tmp_path: Path) -> None:
    # awsdoeks-69's Gloo line: the reason is on the indented lines the PR wrapped it onto
    log = write(
        tmp_path / "wrapped.log",
        "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/"
        "transport/tcp/pair.cc:152]",
        "  timed out connecting: SO_ERROR: Connection refused, remote=[10.0.0.7]:29501",
    )
    root = explain([log])[0]
    assert root.cause == "network-unreachable" and "remote=[10.0.0.7]" in root.evidence.text
    # a traceback's indented source line under a wrapped hit is code, not the message
    code = write(
        tmp_path / "code.log",
        "RuntimeError: NCCL communicator was aborted on rank 3 while waiting for the peers of rank",
        "    store = TCPStore(result.hostname, result.port, world_size, start_daemon)",
    )
    assert "TCPStore" not in explain([code])[0].evidence.text


def test_vllms_engine_startup_failure_points_above_itself(tmp_path: Path) -> None:
    # vLLM v1 (engine/utils.py wait_for_engine_startup, core.py) says "See root cause above";
    # awsdoeks-50/69 (tuning part) end with these lines after the Gloo failure
    for line in (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
        "EngineCore failed to start.",
    ):
        signature = Scanner().classify(line)
        assert signature is not None and signature.tier is Tier.CONSEQUENCE, line
    log = write(
        tmp_path / "vllm.log",
        "(EngineCore pid=3709) ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization`.",
        "(APIServer pid=3653) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}",
    )
    assert "No available memory" in explain([log])[0].evidence.text


def test_a_launchers_called_process_error_is_its_report_of_a_failed_worker(tmp_path: Path) -> None:
    # torch.distributed.launch (torch < 1.9) and accelerate's simple launcher re-raise a worker
    # that exited non-zero as CalledProcessError over its argv (CPython's subprocess texts; no
    # tuning case holds one with a rank's own error yet): a report, after the rank's own words
    failed = (
        "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', '-u', 'train.py', "
        "'--local_rank=3']' returned non-zero exit status 1."
    )
    signature = Scanner().classify(failed)
    assert signature is not None and signature.run_failed and signature.generic
    log = write(tmp_path / "port.log", "RuntimeError: Address already in use", failed)
    assert explain([log])[0].cause == "port-in-use"
    # a report that the run failed outweighs a sign that its work finished
    finished = write(
        tmp_path / "end.log",
        "{'train_runtime': 3512.2, 'train_samples_per_second': 9.1, 'epoch': 3.0}",
        failed,
    )
    assert explain([finished]) != []
    killed = failed.replace("returned non-zero exit status 1", "died with <Signals.SIGKILL: 9>")
    signature = Scanner().classify(killed)
    assert signature is not None and signature.cause == "rank-crashed" and not signature.generic
    # deepspeed's ssh check (a string command) stays ssh's
    ssh = (
        "subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no node2 "
        "hostname' returned non-zero exit status 255."
    )
    signature = Scanner().classify(ssh)
    assert signature is not None and signature.cause == "ssh-unreachable"


RECORD_HEADERS = (
    "[rank0]:E0923 14:51:44.734884 140631144875840 torch/distributed/run.py:833] ",  # glog/c10
    "ERROR:__main__:",  # Python logging's BASIC_FORMAT
    "(Worker_TP12 pid=114) ERROR 08-10 23:02:36 [multiproc_executor.py:898] ",  # vLLM, Ray
    "[2025-01-14 16:14:58,504] [ERROR] [axolotl.train.train:47] [PID:1672] [RANK:0] ",
    "[pod/trainer-worker-1/pytorch] ",  # kubectl logs --prefix
    "[trainer0|0]:",  # torchx (torchtune-2620's healthy log has the same tag)
    "olmo2_cpt/0 [default0]:",  # NeMo-Run
    "1: [rank: 1] ",  # srun --label, then Lightning's rank tag
    "Nov 26 16:46:33 gpu01 python[1234]: ",  # syslog/journald
    "Preparing test set...:  46%|####6     | 31/67 [29:02<35:12, 58.67s/it]",  # myria3d-123
    "\x1b[36m(pid=4321)\x1b[0m ",  # Ray's coloured tag of an unnamed task
    "[rank0]:[E1106 12:00:00.123456789 ProcessGroupNCCL.cpp:1484] ",  # c10's bracketed form
)


@pytest.mark.parametrize("header", RECORD_HEADERS)
def test_a_ranks_exception_behind_a_loggers_record_header_is_read(
    tmp_path: Path, header: str
) -> None:
    # a Python exception's last line is found where it starts its record; the loggers and
    # collectors that print a rank's lines put their own header first (each as its source
    # formats it; the tqdm bar: the next record printed after it without a newline)
    key = "FileNotFoundError: [Errno 2] No such file or directory: '._signal_file_node0_KfmwNg'"
    log = write(tmp_path / "file.log", "starting", header + key)  # llmfoundry-1736's key line
    root = explain([log])[0]
    assert root.cause == "storage-missing" and key in root.evidence.text
    generic = "ValueError: Expected input batch_size (4) to match target batch_size (8)."
    log = write(tmp_path / "value.log", "starting", header + generic)
    root = explain([log])[0]
    assert root.cause == "rank-crashed" and generic in root.evidence.text


def test_an_info_record_header_or_a_progress_bar_is_no_failure(tmp_path: Path) -> None:
    log = write(
        tmp_path / "healthy.log",
        "INFO 08-10 23:02:36 [model_runner.py:1008] Loading model weights took 14.99 GB",
        "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully "
        "finished. Waiting 300 seconds for other agents to finish.",
        "I0923 14:51:44.734884 140631144875840 torch/distributed/run.py:793] Using nproc 8",
        "Epoch 3:  99%|#########9| 99/100 [01:02<00:00,  1.60it/s, loss=0.213, v_num=0]",
    )
    assert explain([log]) == []


def test_a_loggers_record_of_an_uncaught_exception_is_the_ranks_own_error(tmp_path: Path) -> None:
    # olmo-552 (tuning): OLMo's excepthook logs "Uncaught <type>: <message>" at CRITICAL after
    # healthy step records; the exception is not at the start of its record
    key = "Uncaught OLMoThreadError: generator thread data thread 3 failed"
    log = write(
        tmp_path / "olmo.log",
        "[2024-04-18 19:06:17] INFO     [olmo.train:816, rank=0] [step=75/739328]",
        "    train/CrossEntropyLoss=7.417",
        f"[2024-04-18 19:10:41] CRITICAL [olmo.util:158, rank=0] {key}",
    )
    root = explain([log])[0]
    assert root.cause == "rank-crashed" and key in root.evidence.text
    for line in ("Unhandled exception: ValueError: bad shape", "Unhandled ValueError: bad"):
        signature = Scanner().classify(line)
        assert signature is not None and signature.cause == "rank-crashed", line
    # a sentence about handling is no exception
    assert Scanner().classify("INFO: uncaught exceptions are logged to run.log") is None


def test_slurms_refusal_of_a_request_is_its_own_cause(tmp_path: Path) -> None:
    # radicalsaga-835 and radicalpilot-2109 (tuning): sbatch's and srun's refusals (Slurm's
    # sbatch.c "Batch job submission failed: …", launch.c "Unable to create step for job N: …",
    # allocate.c "Unable to allocate resources: …"): nothing ran; the reason is after the colon
    for line in (
        "sbatch: error: Batch job submission failed: Requested GRES option unsupported by "
        "configured SelectType plugin",
        "srun: error: Unable to create step for job XXXX: Invalid generic resource (gres) "
        "specification",
        "srun: error: Unable to allocate resources: Requested node configuration is not available",
        "salloc: error: Unable to allocate resources: Invalid account or account/partition "
        "combination specified",
    ):
        log = write(tmp_path / "refused.log", "--> Checking available allocation...OK", line)
        root = explain([log])[0]
        assert root.cause == "resource-request" and line in root.evidence.text, line
    # a step asked for after the job ended is that end speaking, not a refusal
    late = "srun: error: Unable to create step for job 42: Job/step already completing or completed"
    signature = Scanner().classify(late)
    assert signature is None or signature.cause != "resource-request"


def test_a_rank_dead_of_sigbus_points_at_shared_memory(tmp_path: Path) -> None:
    # Linux raises SIGBUS on a write into a shared-memory mapping tmpfs cannot back: with
    # /dev/shm full (Docker's 64 MB) a data loader's workers or NCCL die so; the launchers'
    # reports of it (torchelastic, composer, deepspeed, MPICH, bash), from their own texts (no
    # tuning case holds a bare one: the corpus's shm cases print the DataLoader's message)
    for line in (
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 1 "
        "(pid: 5621) of binary: /usr/bin/python3.10",
        "  traceback : Signal 7 (SIGBUS) received by PID 753",
        "ERROR:composer.cli.launcher:Rank 2 crashed with exit code -7.",
        "[2023-07-31 19:20:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'train.py'] exits with return code = -7",
        "APPLICATION TERMINATED WITH THE EXIT STRING: Bus error (signal 7)",
        "/var/spool/slurmd/job1/slurm_script: line 28:  8156 Bus error               python3 x.py",
    ):
        signature = Scanner().classify(line)
        assert signature is not None and signature.cause == "shm-exhausted", line
        assert signature.run_failed, line  # a report: a rank's own words come first
    # SIGKILL stays a crash; a rank's own error before the report stays the cause
    assert Scanner().classify("  exitcode  : -9 (pid: 753)").cause == "rank-crashed"  # type: ignore[union-attr]
    log = write(
        tmp_path / "own.log",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0",
    )
    assert explain([log])[0].cause != "shm-exhausted"


def test_a_rank_that_cannot_download_a_file_it_has_no_copy_of(tmp_path: Path) -> None:
    # hpcfund-12 (tuning): transformers' cached_file on a node cut off from the Hub; the same
    # family in huggingface_hub's, requests' and urllib's words (their own texts)
    key = (
        "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't "
        "find it in the cached files and it looks like facebook/esm2_t33_650M_UR50D is not the "
        "path to a directory containing a file named config.json."
    )
    log = write(tmp_path / "hub.log", "Loading model...", key)
    root = explain([log])[0]
    assert root.cause == "download-failed" and "couldn't connect" in root.evidence.text
    for line in (
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to "
        "locate the file on the Hub and we cannot find the requested files in the local cache.",
        "[rank0]: requests.exceptions.ConnectionError: (MaxRetryError('HTTPSConnectionPool("
        "host=\\'huggingface.co\\', port=443): Max retries exceeded with url: /api/models/x",
        "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
    ):
        signature = Scanner().classify(line)
        assert signature is not None and signature.cause == "download-failed", line
    # the hub's warning before it retries or uses its cache is no failure
    healthy = write(
        tmp_path / "cached.log",
        "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
        "exceeded with url: /bert-base-uncased/resolve/main/config.json (Caused by "
        "ConnectTimeoutError())\"), '(Request ID: 1)')' thrown while requesting HEAD "
        "https://huggingface.co/bert-base-uncased/resolve/main/config.json",
        "Retrying in 1s [Retry 1/5].",
        "epoch 1 loss 0.25",
    )
    assert explain([healthy]) == []


def test_a_background_threads_traceback_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    # Python prints a thread's uncaught exception under "Exception in thread NAME:"
    # (threading.excepthook) and multiprocessing's queue feeder thread prints the error it
    # caught (queues.py _feed): the thread ends, the process goes on
    feeder = write(
        tmp_path / "feeder.log",
        "epoch 3 loss 0.12",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.8/multiprocessing/queues.py", line 245, in _feed',
        "    send_bytes(obj)",
        '  File "/usr/lib/python3.8/multiprocessing/connection.py", line 368, in _send',
        "    n = write(self._handle, buf)",
        "BrokenPipeError: [Errno 32] Broken pipe",
        "epoch 4 loss 0.11",
    )
    thread = write(
        tmp_path / "thread.log",
        "Exception in thread Thread-3:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner',
        "    self.run()",
        "ConnectionResetError: [Errno 104] Connection reset by peer",
        "step 200 loss 1.1",
    )
    assert explain([feeder]) == [] and explain([thread]) == []
    # the same exception raised by the program's own (main) thread is a failure
    main = write(
        tmp_path / "main.log",
        "Traceback (most recent call last):",
        '  File "train.py", line 10, in <module>',
        "    main()",
        "BrokenPipeError: [Errno 32] Broken pipe",
    )
    assert explain([main])[0].cause == "rank-crashed"
    # and a launcher's report that the run failed is still one, whatever a thread printed
    failed = write(
        tmp_path / "failed.log",
        *Path(thread).read_text().splitlines(),
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    )
    assert explain([failed])[0].cause == "rank-crashed"


def test_a_failure_the_program_says_it_retries_is_no_failure(tmp_path: Path) -> None:
    # Lightning's BatchSizeFinder (tuner/batch_size_scaling.py) after an OOM it caught, and a
    # logger's record of a failure it retries: the line says the program went on
    finder = write(
        tmp_path / "finder.log",
        "Batch size 4096 failed, trying batch size 2048",
        "Batch size 2048 succeeded, trying batch size 4096",
        "Finished batch size finder, will continue with full run using batch size 2048",
    )
    logged = write(
        tmp_path / "upload.log",
        "2024-01-01 12:00:00 ERROR [trainer.py:12] Failed to upload checkpoint to s3, will "
        "retry: ConnectionError: Connection reset by peer",
        "2024-01-01 12:00:05 INFO [trainer.py:14] checkpoint uploaded",
    )
    assert explain([finder]) == [] and explain([logged]) == []
    # without a retry the lost peer is a failure, and a root cause's own line stays one
    lost = write(tmp_path / "lost.log", "RuntimeError: Connection reset by peer")
    assert explain([lost])[0].cause == "rank-crashed"
    oom = write(
        tmp_path / "oom.log",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB, retrying",
    )
    assert explain([oom])[0].cause == "out-of-memory"


def test_nccl_proxy_warnings_after_a_finished_test_are_no_failure() -> None:
    # deepep-41 (tuning): NCCL's proxy service thread warns at teardown after every run
    assert explain(_case_logs("deepep-41-healthy-intranode-teardown-proxy-warns")) == []


def test_c10ds_connect_summary_yields_to_the_attempt_that_says_why() -> None:
    # grl-27 (tuning): the store client's "[E] … failed to connect to any network address of
    # (05, 40323)." names no reason; its attempts' "[W] … (errno: 110 - Connection timed out)"
    # lines do
    root = explain(_case_logs("grl-27-torchx-master-addr-05-connect-timed-out"))[0]
    assert root.cause == "connection-refused"
    assert "(errno: 110 - Connection timed out)" in root.evidence.text


def test_a_connect_summary_without_attempt_lines_stays_the_evidence(tmp_path: Path) -> None:
    log = write(
        tmp_path / "summary.log",
        "[E socket.cpp:610] [c10d] The client socket has failed to connect to any network "
        "address of (node1, 29500).",
    )
    root = explain([log])[0]
    assert root.cause == "connection-refused" and "any network address" in root.evidence.text


def test_the_raylets_oom_summary_counts_only_when_it_killed_a_worker() -> None:
    # Ray's raylet (node_manager.cc) sums up each period on the driver's console; with no
    # worker killed for memory the line says only that others crashed (easyr1-185's wording)
    line = _key_line("easyr1-185-raylet-worker-killed-memory-pressure")
    assert "1 Workers (tasks / actors) killed due to memory pressure (OOM)" in line
    no_oom = line.replace("1 Workers (tasks / actors) killed", "0 Workers (tasks / actors) killed")
    signature = Scanner().classify(no_oom)
    assert signature is None or signature.cause != "out-of-memory"


def test_an_ofi_completion_error_the_fabric_could_not_deliver_is_network() -> None:
    # nccl-1928 (tuning): torch's ncclRemoteError whose "Last error:" is the aws-ofi-nccl
    # plugin's "NET/OFI Request … completed with error. RC: 113 … (UNDELIVERABLE)": the
    # fabric could not reach the peer (EHOSTUNREACH), not a peer that died
    root = explain(_case_logs("nccl-1928-ofi-undeliverable-rc113-remote-error"))[0]
    assert root.cause == "network-unreachable" and "RC: 113" in root.evidence.text
    # a completion error with another code says nothing of the network
    other = Scanner().classify(
        "NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 5. Error: 12 (EIO). "
        "Completed length: 0"
    )
    assert other is None or other.cause != "network-unreachable"


def test_nccl_tests_column_header_is_no_error(tmp_path: Path) -> None:
    # nccl-583 (tuning): all_reduce_perf's header names an "error" column; pasted as markdown
    # it lost its "#", and the run looked failed (unclassified)
    assert explain(_case_logs("nccl-583-healthy-mpirun-allreduce-perf-a100")) == []
    line = _line_with("nccl-583-healthy-mpirun-allreduce-perf-a100", "algbw")
    assert Scanner().classify(line) is None
    assert Scanner().classify("#" + line) is None
    # an error word elsewhere still is one
    log = write(tmp_path / "t.log", line, "node1: Test CUDA failure common.cu:393 'out of memory'")
    assert explain([log]) != []


def test_a_summary_of_a_timeout_yields_to_torchs_record_of_it() -> None:
    # verl-3873 (tuning): the poster's "(many NCCL timeout errors …)" comes first; the
    # watchdog's record, which names the collective, is the evidence
    root = explain(_case_logs("verl-3873-second-rollout-allreduce-timeout-worker-died"))[0]
    assert root.cause == "collective-timeout"
    assert "Watchdog caught collective operation timeout" in root.evidence.text
