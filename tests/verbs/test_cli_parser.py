"""The CLI's parser: a verb's run builds (and imports) only that verb; help lists them all."""

from __future__ import annotations

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
