"""noderun check: each rule, passing and failing, on small scripts and on the seeds' own."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.check import Severity, lint_sbatch

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n"
BATCH = [(3, "expands-in-batch-shell")]
MISSING = [(4, "missing-srun")]


def codes(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_sbatch(text)]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # seed 002: several tasks, bare python
        ("#SBATCH --ntasks-per-node=4\npython train.py\n", MISSING),
        ("#SBATCH --ntasks=8\nsrun python train.py\n", []),
        ("#SBATCH -n 8\nOMP_NUM_THREADS=1 python3 -u train.py --x 1\n", MISSING),
        ("#SBATCH --ntasks-per-node=4\nsrun -N 2 --label python train.py\n", []),
        ("#SBATCH --ntasks-per-node=4\nsrun --nodes 2 python train.py\n", []),
        ("#SBATCH --ntasks-per-node=4\nexec noderun run train.py\n", []),
        ("#SBATCH --ntasks-per-node=4\npython -m noderun run train.py\n", []),
        ("#SBATCH --ntasks-per-node=4\npython -c 'print(1)'\n", []),
        # one torchrun per job on several nodes
        ("torchrun --nnodes=2 train.py\n", [(3, "torchrun-once")]),
        ("python -m torch.distributed.run --nnodes=2 train.py\n", [(3, "torchrun-once")]),
        ("srun --ntasks-per-node=1 torchrun --nnodes=2 train.py\n", []),
        # seed 000: $SLURM_NODEID expanded by the batch shell
        (
            'srun bash -c "torchrun --node_rank=$SLURM_NODEID t.py"\n',
            [(3, "expands-in-batch-shell")],
        ),
        (
            'srun bash -c "torchrun --node_rank=${SLURM_NODEID} t.py"\n',
            [(3, "expands-in-batch-shell")],
        ),
        ('srun bash -c "torchrun --node_rank=\\$SLURM_NODEID t.py"\n', []),
        ("srun bash -c 'torchrun --node_rank=$SLURM_NODEID t.py'\n", []),
        ("srun torchrun --node_rank=$SLURM_NODEID t.py\n", BATCH),
        ('echo "node $SLURM_NODEID"\n', []),
        # fixed port: a warning
        ("export MASTER_PORT=29500\n", [(3, "fixed-port")]),
        ("export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n", []),
        ("srun torchrun --rdzv_endpoint=$MASTER_ADDR:29400 t.py\n", [(3, "fixed-port")]),
        ("srun torchrun --master-port 1234 t.py\n", [(3, "fixed-port")]),
        # srun mode: one task per GPU
        (
            "#SBATCH --ntasks-per-node=2\n#SBATCH --gpus-per-node=4\nsrun python t.py\n",
            [(5, "gpus-vs-tasks")],
        ),
        ("#SBATCH --ntasks-per-node=4\n#SBATCH --gres=gpu:a100:4\nsrun python t.py\n", []),
        ("#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\nsrun torchrun t.py\n", []),
        # CUDA_VISIBLE_DEVICES from the global rank
        ("export CUDA_VISIBLE_DEVICES=$SLURM_PROCID\n", [(3, "global-rank-device")]),
        ("CUDA_VISIBLE_DEVICES=${RANK} python t.py\n", [(3, "global-rank-device")]),
        ("export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID\n", []),
        ("export CUDA_VISIBLE_DEVICES=0,1,2,3\n", []),
        # #SBATCH after the first command is ignored
        ("echo hi\n#SBATCH --ntasks=4\n", [(4, "late-directive")]),
        # comments and continuations
        ("# python train.py in a comment\n", []),
        (
            "#SBATCH --ntasks-per-node=4\npython \\\n  train.py \\\n  --lr 1\n",
            [(4, "missing-srun")],
        ),
        ("#SBATCH --ntasks-per-node=4\nmodule load x && python train.py\n", MISSING),
    ],
)
def test_rules(body: str, expected: list[tuple[int, str]]) -> None:
    assert codes(HEAD + body) == expected


def test_fixed_port_is_only_a_warning() -> None:
    (finding,) = lint_sbatch(HEAD + "export MASTER_PORT=29500\n")
    assert finding.severity is Severity.WARNING
    assert "SLURM_JOB_ID" in finding.fix


def test_finding_renders_file_line_problem_fix() -> None:
    (finding,) = lint_sbatch(HEAD + "#SBATCH --ntasks-per-node=4\npython train.py --lr 1\n")
    line = finding.render("job.sbatch")
    assert line.startswith("job.sbatch:4: `python train.py --lr 1` is not under srun")
    assert line.endswith("; fix: srun python train.py --lr 1")
    assert "8 tasks" in line


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("seed002_wrong.sbatch", [(13, "missing-srun")]),
        ("seed002_fixed.sbatch", []),
        ("seed000_wrapper_wrong.sh", [(8, "expands-in-batch-shell")]),
        ("seed000_wrapper_fixed.sh", []),
        ("seed000_nvflare.slurm", [(8, "fixed-port")]),
        (
            "seed003_wrong.slurm",
            [(12, "global-rank-device"), (15, "fixed-port"), (15, "torchrun-once")],
        ),
        ("seed003_fixed.slurm", []),
    ],
)
def test_seed_scripts(name: str, expected: list[tuple[int, str]]) -> None:
    assert codes((FIXTURES / name).read_text()) == expected


def test_every_fixed_seed_script_has_no_error() -> None:
    for path in FIXTURES.glob("*fixed*"):
        assert all(f.severity is Severity.WARNING for f in lint_sbatch(path.read_text())), path


@pytest.mark.parametrize(
    ("line", "codes"),
    [
        ("srun noderun run --nproc-per-node 2 train.py", ["srun-noderun-agents"]),
        # Slurm 22.05 ignores srun's own --ntasks-per-node without -n (measured on the lab):
        # two agents per node may still start, said as a warning
        (
            "srun --ntasks-per-node=1 noderun run --nproc-per-node 2 train.py",
            ["srun-noderun-agents"],
        ),
        ("srun -N 2 --ntasks-per-node=1 -n 2 noderun run --nproc-per-node 2 train.py", []),
        ("srun -N 2 -n 2 noderun run train.py", []),
        ("srun noderun run --mode srun train.py", []),
        ("srun noderun run --mode=srun --nproc-per-node 4 train.py", ["srun-noderun-nproc"]),
        ("srun python -m noderun run train.py", ["srun-noderun-agents"]),
        ("noderun run --nproc-per-node 2 train.py", []),  # starts its own srun step
    ],
)
def test_srun_noderun_run(line: str, codes: list[str]) -> None:
    """`srun noderun run` is right with one task per node or --mode srun (noderun_step.py)."""
    text = f"#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2\n{line}\n"
    assert [f.code for f in lint_sbatch(text)] == codes
