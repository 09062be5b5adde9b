"""A start-up hang named from the log of a running job (pure part)."""

from __future__ import annotations

from noderun.explain.hang import hang_finding, read_startup

SEED_002 = """\
GPU available: False, used: False
Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16
"""
HEALTHY = "".join(
    f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4)
)


def test_one_of_sixteen_and_quiet_is_missing_launcher() -> None:
    finding = hang_finding(SEED_002, "slurm-268815.out", quiet_for=45, threshold=20)
    assert finding is not None
    assert finding.cause == "missing-launcher"
    assert "1/16 ranks started (rank 0)" in finding.summary
    assert "15 were never launched" in finding.summary
    assert "srun python" in finding.fix
    assert (finding.evidence.file, finding.evidence.line) == ("slurm-268815.out", 2)


def test_not_quiet_long_enough_is_not_yet_a_hang() -> None:
    assert hang_finding(SEED_002, "out", quiet_for=5, threshold=20) is None


def test_every_member_announced_is_not_a_hang() -> None:
    assert hang_finding(HEALTHY, "out", quiet_for=600) is None


def test_registered_is_not_a_hang_even_if_one_log_shows_only_rank_0() -> None:
    text = SEED_002.replace("/16", "/4") + "All distributed processes registered. Starting with 4\n"
    assert hang_finding(text, "out", quiet_for=600) is None


def test_a_log_without_members_says_nothing() -> None:
    assert read_startup("epoch 1 loss 0.3\n") is None
    assert hang_finding("epoch 1 loss 0.3\n", "out", quiet_for=600) is None


def test_members_of_several_nodes_are_counted_once() -> None:
    startup = read_startup(SEED_002 + SEED_002 + HEALTHY.replace("/4", "/16"))
    assert startup is not None
    assert (startup.world, sorted(startup.members)) == (16, [0, 1, 2, 3])
