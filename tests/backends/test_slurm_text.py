"""The SLURM client's parsers on output captured from the lab (tests/backends/slurm_output)."""

from __future__ import annotations

from pathlib import Path

from noderun.backends.slurm_text import (
    JobRecord,
    format_table,
    job_row_nodes_late,
    parse_exit_code,
    parse_sacct_job,
    parse_sacct_rows,
    parse_scontrol_job,
    parse_sinfo_nodes,
    parse_table,
    sacct_settled,
)
from noderun.verify.slurm_checks import job_nodes, summary_rows

OUTPUT = Path(__file__).parent / "slurm_output"


def _read(name: str) -> str:
    return (OUTPUT / name).read_text()


def test_scontrol_show_job_of_a_running_requeueable_job() -> None:
    fields = parse_scontrol_job(_read("scontrol_show_job_running.txt"))
    record = JobRecord("2", fields, "scontrol")
    assert record.state.state == "RUNNING" and record.state.status == "running"
    assert record.state.nodes == "node[1-2]" and record.state.exit_code == 0
    assert record.requeueable
    out = fields["StdOut"]
    assert record.output_files() == [out] and out.endswith("/logs/slurm-2.out")
    assert record.paths() == [fields["Command"], out, "/work/wt/stacks"]


def test_a_job_record_without_requeue_is_not_requeueable() -> None:
    text = _read("scontrol_show_job_running.txt").replace("Requeue=1", "Requeue=0")
    assert not JobRecord("2", parse_scontrol_job(text), "scontrol").requeueable


def test_sacct_job_line_with_a_state_holding_spaces() -> None:
    fields = parse_sacct_job(
        _read("sacct_job_cancelled.txt"), "JobID,State,ExitCode,WorkDir,SubmitLine"
    )
    assert fields["State"] == "CANCELLED by 0" and fields["WorkDir"] == "/tmp/stk"
    record = JobRecord("1", fields, "sacct")
    assert record.state.status == "cancelled" and record.state.final
    assert record.output_files() == ["/tmp/stk/slurm-1.out"]


def test_sacct_submit_line_may_contain_the_separator() -> None:
    fields = parse_sacct_job("5|COMPLETED|0:0|/w|sbatch --wrap 'a|b' x.sh|node1")
    assert fields["SubmitLine"] == "sbatch --wrap 'a|b' x.sh" and fields["NodeList"] == "node1"


def test_exit_codes() -> None:
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("") == (None, None)


def test_sacct_steps_round_trip_through_the_summary_table(tmp_path: Path) -> None:
    rows = parse_sacct_rows(_read("sacct_steps_cancelled.txt"))
    assert rows[0][0] == "JobID" and len(rows) == 5
    assert sacct_settled(rows, job_final=True)
    lines = format_table(rows)
    back = parse_table(lines)
    assert back[0]["State"] == "CANCELLED by 0" and back[0]["NodeList"] == "node[1-2]"
    assert [r["JobID"] for r in back] == ["1", "1.batch", "1.0", "1.1"]
    summary = tmp_path / "sacct_summary.txt"
    summary.write_text("sacct for job 1\n" + "\n".join(lines) + "\n")
    assert summary_rows(summary)[0]["Elapsed"] == "00:00:02"  # not shifted by "by 0"


def test_a_running_step_is_not_settled() -> None:
    rows = parse_sacct_rows("JobID|JobName|State\n3|j|RUNNING\n3.0|python|RUNNING\n")
    assert not sacct_settled(rows, job_final=False)


def test_a_job_that_ran_no_step_has_none_to_wait_for() -> None:
    """One node in torchrun mode: torchrun on the batch host, no srun step record to come."""
    rows = parse_sacct_rows("JobID|JobName|State\n4|j|RUNNING\n4.batch|batch|RUNNING\n")
    assert not sacct_settled(rows, job_final=False)
    assert sacct_settled(rows, job_final=False, steps_run=False)
    assert not sacct_settled(rows, job_final=True, steps_run=False)


def test_a_job_row_with_only_the_batch_host_is_named_not_waited_for(tmp_path: Path) -> None:
    """slurmdbd held a finished 2-node job's record with NodeList node1 (the batch host) for
    0.8-4.8 s on the lab; verify once reported the job ran on node1 alone. Waiting for the
    record cost that long at the end of every `submit --wait`: the summary now says it, and
    verify takes the steps' nodes too."""
    header = "JobID|JobName|State|ExitCode|Elapsed|NNodes|NodeList\n"
    steps = (
        "7.batch|batch|COMPLETED|0:0|00:00:04|1|node1\n"
        "7.0|python3|COMPLETED|0:0|00:00:04|2|node[1-2]\n"
    )
    early = parse_sacct_rows(header + "7|job|COMPLETED|0:0|00:00:04|1|node1\n" + steps)
    late = parse_sacct_rows(header + "7|job|COMPLETED|0:0|00:00:04|2|node[1-2]\n" + steps)
    assert sacct_settled(early, job_final=True) and sacct_settled(late, job_final=True)
    assert job_row_nodes_late(early) == "node[1-2]"
    assert job_row_nodes_late(late) is None
    summary = tmp_path / "sacct_summary.txt"
    summary.write_text("sacct for job 7\n" + "\n".join(format_table(early)) + "\n")
    rows = summary_rows(summary)
    assert rows[0]["NodeList"] == "node1"
    assert job_nodes(rows, rows[0]) == "node[1-2]"


def test_sinfo_nodes() -> None:
    nodes = parse_sinfo_nodes(_read("sinfo_nodes.txt"))
    assert nodes == [
        ("node1", "debug*", 2, 0),
        ("node2", "debug*", 2, 0),
        ("node3", "debug*", 2, 0),
    ]


def test_output_files_of_a_job_sacct_only_knows() -> None:
    """sacct 22.05 records no StdOut: the submit line, then the script's #SBATCH lines."""
    from noderun.backends.slurm_text import JobRecord, submit_output_files, submit_script

    script = "#!/bin/bash\n#SBATCH --output=logs/train-%j.out\n#SBATCH -e /tmp/e-%j.txt\n"
    assert submit_script("sbatch --parsable -N 2 --time=5 job.sh") == "job.sh"
    fields = submit_output_files("sbatch --parsable job.sh", script)
    assert fields == {"StdOut": "logs/train-%j.out", "StdErr": "/tmp/e-%j.txt"}
    assert submit_output_files("sbatch -o x-%j.log job.sh", script)["StdOut"] == "x-%j.log"
    record = JobRecord("74", {"WorkDir": "/w", "State": "COMPLETED", **fields}, "sacct")
    assert record.output_files() == ["/w/logs/train-74.out", "/tmp/e-74.txt"]
    bare = JobRecord("74", {"WorkDir": "/w", "State": "COMPLETED"}, "sacct")
    assert bare.output_files() == ["/w/slurm-74.out"]
