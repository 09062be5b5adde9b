"""tests/cpu_report.py (make test-cpu's report) on a few lines of dump-acct and of the test log."""

from __future__ import annotations

from tests.cpu_report import parse_dump, per_test_report, process_report, tree_of

# dump-acct's columns: comm|v3|utime|stime|etime|uid|gid|mem|io|pid|ppid|… (ticks of 1/100 s)
DUMP = """\
slurmstepd      |v3|     1.00|     1.00|  900.00|0|0|0|0|     100|       1|S|0|__|Fri
pt_elastic      |v3|   150.00|    40.00|  800.00|0|0|0|0|     101|     100|S|0|__|Fri
pt_gloo_runloop |v3|   200.00|    50.00|  700.00|0|0|0|0|     102|     101|S|0|__|Fri
pytest          |v3|   300.00|    20.00| 9000.00|0|0|0|0|     200|       1|S|0|__|Fri
python3         |v3|   110.00|    10.00|  300.00|0|0|0|0|     201|     200|S|0|__|Fri
bash            |v3|     0.00|     0.00|    1.00|0|0|0|0|     300|     999|S|0|__|Fri
not a record
"""


def test_dump_lines_become_processes_with_their_tree() -> None:
    procs = parse_dump(DUMP.splitlines())
    assert [p.comm for p in procs] == [
        "slurmstepd", "pt_elastic", "pt_gloo_runloop", "pytest", "python3", "bash"
    ]  # fmt: skip
    assert procs[2].cpu == 2.5 and procs[2].elapsed == 7.0 and procs[2].ppid == 101
    by_pid = {p.pid: p for p in procs}
    assert [tree_of(p, by_pid) for p in procs] == [
        "slurmstepd", "slurmstepd", "slurmstepd", "pytest", "pytest", "other"
    ]  # fmt: skip


def test_process_report_splits_cpu_by_tree_and_counts_agents() -> None:
    report = "\n".join(process_report(parse_dump(DUMP.splitlines())))
    assert "processes: 6, CPU 9 s" in report  # 0.02 + 1.9 + 2.5 + 3.2 + 1.2
    assert "Slurm jobs" in report and "local (pytest)" in report
    # four processes of >= 1 CPU-s; the agent (101) and pytest (200) started one of them
    assert "torch processes (>= 1 CPU-s): 4, 9 s; of them agents/launchers: 2, 5 s" in report


def test_per_test_report_ranks_tests_and_files() -> None:
    lines = ["1.5\t3.0\ttests/a.py::one", "4.0\t2.0\ttests/b.py::two", "0.5\t1.0\ttests/a.py::x"]
    report = per_test_report([*lines, "garbage"], top=2)
    assert report[0] == "tests: 3, CPU 6 s in pytest's own trees"
    assert report[1].endswith("tests/b.py::two") and report[2].endswith("tests/a.py::one")
    assert report[-2:] == ["     4.0 s  tests/b.py", "     2.0 s  tests/a.py"]
