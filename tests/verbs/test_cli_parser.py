"""The CLI's parser: a verb's run builds (and imports) only that verb; help lists them all."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from noderun import cli


def _imported_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\nfrom noderun import cli\n"
        f"cli.build_parser({argv!r})\n"
        "print(' '.join(m for m in sys.modules if m.startswith('noderun.verbs.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_a_verb_imports_only_its_own_module() -> None:
    verbs = {f"noderun.verbs.{verb}" for verb in cli.VERBS}
    assert _imported_after(["submit", "--help"]) & verbs == {"noderun.verbs.submit"}
    assert _imported_after(["--help"]) & verbs == verbs
    assert _imported_after(["bogus"]) & verbs == verbs  # the error lists every verb


def test_top_level_help_still_lists_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    listed = capsys.readouterr().out
    assert all(re.search(rf"^    {verb}\b", listed, re.M) for verb in cli.VERBS)


def test_an_unknown_verb_is_one_line_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["bogus"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "invalid choice: 'bogus'" in err and "'scale'" in err


def test_verbs_that_read_a_run_without_a_checkpoint_never_import_torch(tmp_path) -> None:
    """verify/explain/status of a finished run read files: import torch (1.3 CPU-s) only to load
    a checkpoint. A hand-written run directory of a 2-rank run that saved none."""
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    for rank in (0, 1):
        (run / "logs" / f"rank{rank}.log").write_text(f"rank {rank} done\n")
    topology = {"nnodes": 2, "nproc_per_node": 1, "world_size": 2}
    record = {"backend": "local", "status": "completed", "exit_code": 0, "topology": topology}
    (run / "run.json").write_text(json.dumps(record))
    code = (
        "import contextlib, io, json, sys\nfrom noderun import cli\ncodes = []\n"
        f"for verb in ('verify', 'explain', 'status'):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"        codes.append([cli.main([verb, {str(run)!r}]), out.getvalue()])\n"
        "print(json.dumps([codes, 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    codes, imported = json.loads(done.stdout)
    assert "rank-logs     PASS" in codes[0][1], codes  # verify ran its checks on the run
    assert not imported, codes
