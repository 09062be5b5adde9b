"""Every Python and shell snippet of the README and docs/ runs as written.

A fenced ``python`` or ``sh`` block is a snippet; ``text`` blocks are output or command synopses.
An HTML comment right above a block says how to run it:

- none: ``python`` runs under ``noderun run --nproc-per-node 2`` (every snippet is a training
  script), ``sh`` runs in bash, both in one scratch folder per page where ``examples`` is the
  repository's and the venv's ``bin`` comes first on PATH;
- ``save=NAME``: the block is written to NAME in that folder for the page's later blocks;
- ``lane=slurm``: a shell block run in the Slurm lane (on the lab);
- ``excerpt=PATH``: the block is a verbatim excerpt of that file, which its own tests run;
- ``test=PATH::NAME``: a shell block that test runs itself, as written, through
  ``run_snippet_of`` (one run for the page and the test's own assertions on what it left);
- ``skip reason="…"``: run elsewhere (the reason names where); a skip without a reason fails.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^( *)```(\w*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    language: str
    code: str
    options: dict[str, str]

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The fenced python/sh blocks of ``page`` with the directive above each."""
    lines = page.read_text().splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, language = match.group(1), match.group(2)
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        directive = DIRECTIVE.match(lines[i - 1]) if i else None
        options = dict(_option(w) for w in _words(directive)) if directive else {}
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        if language in ("python", "sh"):
            found.append(Snippet(page, i + 1, language, code, options))
        i = end + 1
    return found


def _words(directive: re.Match[str]) -> list[str]:
    return shlex.split(directive.group(1))


def _option(word: str) -> tuple[str, str]:
    key, _, value = word.partition("=")
    return key, value


ALL = [s for page in PAGES for s in snippets(page)]


def _run(
    snippet: Snippet, command: list[str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{snippet.where} failed with exit {proc.returncode}:\n{snippet.code}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    )
    return proc


def _page_dir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def run_page(page: Path, lane: str, tmp_path: Path) -> int:
    """Run ``page``'s snippets of ``lane`` in order, in one scratch folder; how many ran."""
    cwd = _page_dir(tmp_path)
    ran = 0
    for number, snippet in enumerate(snippets(page)):
        opts = snippet.options
        if "skip" in opts or "excerpt" in opts or "test" in opts:
            continue
        if "save" in opts:
            (cwd / opts["save"]).write_text(snippet.code)
            continue
        if opts.get("lane", "local") != lane:
            continue
        if snippet.language == "python":
            script = cwd / f"snippet_{number}.py"
            script.write_text(snippet.code)
            run_dir = cwd / "runs" / f"snippet-{number}"
            noderun = ["noderun", "run", "--nproc-per-node", "2", "--run-dir", str(run_dir)]
            _run(snippet, [*noderun, script.name], cwd, timeout=240)
        else:
            _run(snippet, ["bash", "-euo", "pipefail", "-c", snippet.code], cwd, timeout=420)
        ran += 1
    return ran


def run_snippet_of(page: str, test: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The shell block of ``page`` (relative to the repository) marked ``test=TEST``, run as
    ``run_page`` runs it (exit 0 asserted) in ``tmp_path``, where ``TEST`` then finds what it
    left (the page's ``runs/...``): the page's command and the test's assertions share one run.
    The page's ``save=NAME`` blocks above it are written first, as ``run_page`` writes them."""
    blocks = snippets(ROOT / page)
    (snippet,) = [s for s in blocks if s.options.get("test") == test]
    assert snippet.language == "sh", snippet.where
    cwd = _page_dir(tmp_path)
    for saved in blocks[: blocks.index(snippet)]:
        if "save" in saved.options:
            (cwd / saved.options["save"]).write_text(saved.code)
    command = ["bash", "-euo", "pipefail", "-c", snippet.code]
    return _run(snippet, command, cwd, timeout=420)


def test_every_snippet_is_accounted_for() -> None:
    """Each block runs here, is saved for a later one, is an excerpt, or says where it runs."""
    assert len(ALL) >= 10, [s.where for s in ALL]
    for snippet in ALL:
        opts = snippet.options
        unknown = set(opts) - {"save", "lane", "excerpt", "skip", "reason", "test"}
        assert not unknown, f"{snippet.where}: unknown snippet option(s) {sorted(unknown)}"
        if "test" in opts:  # that test exists and runs this page's block (or its fixture)
            path, _, name = opts["test"].partition("::")
            source = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
            assert f"def {name}(" in source, f"{snippet.where}: no test {opts['test']}"
            source += (ROOT / "tests" / "conftest.py").read_text()  # session fixtures
            page = str(snippet.page.relative_to(ROOT))
            assert "run_snippet_of" in source, snippet.where
            assert f'"{page}"' in source, f"{snippet.where}: {path} does not run {page}"
            assert snippet.language == "sh", snippet.where
        if "skip" in opts:
            assert opts.get("reason"), f"{snippet.where}: a skipped snippet must say where it runs"
        assert opts.get("lane", "local") in ("local", "slurm"), snippet.where


@pytest.mark.parametrize(
    "snippet", [s for s in ALL if "excerpt" in s.options], ids=lambda s: s.where
)
def test_excerpts_are_verbatim(snippet: Snippet) -> None:
    """An excerpt's lines stand, in order and unchanged, in the file whose tests run it."""
    source = (ROOT / snippet.options["excerpt"]).read_text()
    body = [line for line in snippet.code.splitlines() if line.strip()]
    stripped = "\n".join(line.strip() for line in source.splitlines())
    assert "\n".join(line.strip() for line in body) in stripped, snippet.where


def test_a_broken_snippet_fails(tmp_path: Path) -> None:
    """The runner reports a failing snippet (so the tests below can fail)."""
    page = tmp_path / "page.md"
    page.write_text("```sh\nfalse\n```\n")
    (tmp_path / "work").mkdir()
    with pytest.raises(AssertionError, match="failed with exit 1"):
        run_page(page, "local", tmp_path / "work")


LOCAL_PAGES = [
    p for p in PAGES if any(s.options.get("lane", "local") == "local" for s in snippets(p))
]


@pytest.mark.slow
@pytest.mark.parametrize("page", LOCAL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    run_page(page, "local", tmp_path)


@pytest.mark.slurm
@pytest.mark.parametrize(
    "page",
    [
        p
        for p in PAGES
        if any(s.options.get("lane") == "slurm" and "test" not in s.options for s in snippets(p))
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_page_snippets_run_on_the_lab(page: Path, tmp_path: Path) -> None:
    from tests.slurm.lab import require_lab

    require_lab()
    assert run_page(page, "slurm", tmp_path) >= 1
