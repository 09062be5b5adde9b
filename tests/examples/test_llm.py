"""The LLM example without a process group: its data, its config errors, its data stream."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import clean_env, noderun, run_args
from tests.examples.llm_helpers import FINETUNE, example

instructions = example("instructions")
settings = example("settings")


def test_prepare_data_is_deterministic_and_holds_out_whole_topics(
    llm_dataset: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again.jsonl"
    example("prepare_data").write(again)
    assert again.read_bytes() == llm_dataset.read_bytes()
    rows = [json.loads(line) for line in llm_dataset.read_text().splitlines()]
    assert all(set(r) == {"instruction", "response", "topic", "split"} for r in rows)
    train = {r["topic"] for r in rows if r["split"] == "train"}
    held = {r["topic"] for r in rows if r["split"] == "eval"}
    assert held and train and not held & train
    assert held == set(instructions.eval_topics(list(train | held)))
    assert len(train | held) == 79  # every topic of pydoc_data.topics made records
    assert sum(r["split"] == "eval" for r in rows) >= 20
    assert all(len(r["response"]) <= 6500 and r["response"].strip() for r in rows)
    first = next(r for r in rows if r["topic"] == "assert")
    assert first["instruction"] == 'Explain The "assert" statement in Python.'
    assert first["response"].startswith("Assert statements are a convenient way")


def test_sections_split_at_underlined_headings() -> None:
    text = "Title\n*****\n\nIntro.\n\nPart\n====\n\nA.\n\nB.\n"
    assert list(instructions.sections(text)) == [("Title", "Intro."), ("Part", "A.\n\nB.")]
    assert list(instructions.chunks("a" * 10 + "\n\n" + "b" * 10, limit=15)) == ["a" * 10, "b" * 10]


def test_stream_continues_at_any_world_size() -> None:
    """Steps taken by 4 ranks then by 2 read the same samples as any other split of them."""
    blocks = instructions.Blocks(torch.arange(30).view(10, 3), torch.arange(30).view(10, 3))
    stream = instructions.Stream(blocks, seed=5)
    whole = stream.batch(0, 25)[0][:, 0].tolist()
    assert sorted(whole[:10]) == list(range(0, 30, 3))  # a pass is a permutation of the blocks
    taken = []
    consumed = 0
    for world, size in ((4, 2), (4, 2), (2, 2)):  # two steps on 4 ranks, one on 2
        for rank in range(world):
            taken += stream.batch(consumed + rank * size, size)[0][:, 0].tolist()
        consumed += world * size
    assert taken == whole[:consumed]


def test_eval_batches_give_every_rank_the_same_count_and_every_block_once() -> None:
    blocks = instructions.Blocks(torch.arange(14).view(7, 2), torch.arange(14).view(7, 2))
    seen = []
    counts = set()
    for rank in range(3):
        batches = list(instructions.eval_batches(blocks, rank, 3, 2))
        counts.add(len(batches))
        for ids, labels in batches:
            seen += [int(i) for i, lab in zip(ids[:, 0], labels[:, 0], strict=True) if lab >= 0]
    assert counts == {2} and sorted(seen) == list(range(0, 14, 2))


def test_config_overrides_and_types(tmp_path: Path) -> None:
    base = Path(FINETUNE).parent / "config.yaml"
    config = settings.load(base, settings.parse_overrides(["--lora.r=4", "--training.fsdp", "no"]))
    assert config.lora.r == 4 and config.training.fsdp is False
    config = settings.load(base, {"lora.target_modules": "[q_proj, v_proj]"})
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert config.training.learning_rate == pytest.approx(1e-3)
    config = settings.load(base, {"training.learning_rate": "2e-4"})  # YAML 1.1 calls it a str
    assert config.training.learning_rate == pytest.approx(2e-4)


@pytest.mark.parametrize(
    ("edit", "args", "problem"),
    [
        (None, ["--training.max_stepz", "3"], "unknown option --training.max_stepz"),
        ("add lora.rank", [], "unknown config key lora.rank"),
        ("drop seed", [], "config key training.seed is missing"),
        (None, ["--training.max_steps", "ten"], "training.max_steps = 'ten' is not of type int"),
        (None, ["--training.lr_scheduler", "step"], "training.lr_scheduler = 'step' is unknown"),
        (None, ["--data.dataset_path", "/no/such.jsonl"], "data.dataset_path /no/such.jsonl does"),
        (None, ["--model.name_or_path", "/no/model"], "model.name_or_path /no/model is not a dir"),
    ],
)
def test_config_mistakes_are_one_line_and_exit_2(
    tmp_path: Path, llm_dataset: Path, edit: str | None, args: list[str], problem: str
) -> None:
    text = (Path(FINETUNE).parent / "config.yaml").read_text()
    text = text.replace("data/pydoc_instructions.jsonl", str(llm_dataset))
    if edit == "add lora.rank":
        text = text.replace("lora:\n", "lora:\n  rank: 8\n")
    elif edit == "drop seed":
        text = "\n".join(line for line in text.splitlines() if "seed:" not in line)
    config = tmp_path / "config.yaml"
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, str(FINETUNE), "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], result.stderr
    if "unknown o" in problem or "key" in problem:
        assert "valid keys: model.name_or_path, model.gguf_file" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # nothing written


def test_missing_dataset_is_named_once_per_node_before_any_group(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = noderun(
        [*run_args(FINETUNE, run_dir), "--data.dataset_path", str(tmp_path / "absent.jsonl")],
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    said = [line for line in result.stdout.splitlines() if "UsageError: data.dataset_path" in line]
    # once per node (local rank 0 says it); the first node's exit 2 may stop the other first
    speakers = [line.split("|")[0] for line in said]
    assert speakers and set(speakers) <= {"0:0", "1:2"}, result.stdout + result.stderr
    assert len(speakers) == len(set(speakers)), result.stdout
    assert "absent.jsonl does not exist on" in said[0]
    assert not (run_dir / "runtime.json").exists()  # no rank got as far as the process group
