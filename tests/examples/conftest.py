"""Session fixtures of the LLM example: the instruction JSONL and a tiny random Llama."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples import llm_helpers  # noqa: F401  (puts examples/llm on sys.path)


@pytest.fixture(scope="session")
def llm_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import prepare_data

    out = tmp_path_factory.mktemp("llm_data") / "pydoc_instructions.jsonl"
    prepare_data.write(out)
    return out


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tiny_model

    return tiny_model.write(tmp_path_factory.mktemp("tiny_llm"))
