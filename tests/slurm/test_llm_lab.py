"""The LLM example on the Slurm lab: submitted on 2 nodes x 2 ranks (FSDP2 + LoRA, sharded
checkpoint on every node), then resumed inside an allocation on 2 nodes x 1 rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noderun import checkpoint
from tests.conftest import ROOT, noderun
from tests.examples.llm_helpers import FINETUNE, eval_lines, metrics
from tests.slurm.lab import PYTHON, job_id_of, read_json, require_lab, salloc

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _overrides(model: Path, data: Path) -> list[str]:
    return [
        "--model.name_or_path", str(model), "--data.dataset_path", str(data),
        "--data.max_seq_length", "64", "--training.per_device_batch_size", "1",
        "--training.gradient_accumulation_steps", "2", "--training.save_steps", "2",
        "--training.eval_steps", "2",
    ]  # fmt: skip


def test_submit_on_two_nodes_then_resume_inside_an_allocation_on_half_the_ranks(
    tmp_path: Path, tiny_llm: Path, llm_dataset: Path
) -> None:
    require_lab()
    first = tmp_path / "submitted"
    result = noderun(
        ["submit", "--wait", "--nodes", "2", "--nproc-per-node", "2", "--time", "5",
         "--run-dir", str(first), str(FINETUNE), *_overrides(tiny_llm, llm_dataset),
         "--training.max_steps", "2"],
        timeout=400,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    job_id = job_id_of(result.stdout)
    runtime = read_json(first / "runtime.json")
    assert (
        sorted(set(runtime["rank_hosts"])) == ["node1", "node2"]
        or len(set(runtime["rank_hosts"])) == 2
    )
    assert runtime["world_size"] == 4
    saved = first / "checkpoints" / "step-00000002"
    assert checkpoint.is_complete(saved) and len(list((saved / "shards").glob("*.distcp"))) == 4
    assert (first / "adapter" / "adapter_model.safetensors").is_file()
    assert job_id in (first / "sacct_summary.txt").read_text()
    evals = eval_lines((first / "logs" / "rank0.log").read_text())

    resumed = tmp_path / "resumed"
    inside = salloc(
        ["--nodes=2", PYTHON, "-m", "noderun", "run", "--nproc-per-node=1",
         f"--run-dir={resumed}", str(FINETUNE), *_overrides(tiny_llm, llm_dataset),
         "--training.max_steps", "4", "--resume", str(saved)]
    )  # fmt: skip
    out, _ = inside.communicate(timeout=400)
    assert inside.returncode == 0, out[-3000:]
    assert "written by 4 ranks, this run has 2" in out
    assert eval_lines(out)[2] == pytest.approx(evals[2], rel=1e-6)  # resharded across nodes
    assert sorted(metrics(resumed)) == [3, 4]
    assert (
        json.loads((resumed / "checkpoints" / "step-00000004" / "meta.json").read_text())[
            "world_size"
        ]
        == 2
    )
