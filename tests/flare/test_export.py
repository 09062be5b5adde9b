"""The exported FLARE job ships the user's own model code, never installed packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import clean_env

EXPORT = """\
import sys
import torch
from noderun.flare import FedAvgJob, Site
sys.path.insert(0, ".")
import usermodel
model = usermodel.Net() if sys.argv[1] == "user" else torch.nn.Linear(4, 2)
job = FedAvgJob("j", model=model, script="train.py", sites=[Site("site-1")])
print(job.export(sys.argv[2]))
"""


def _export(tmp_path: Path, which: str) -> list[str]:
    project = tmp_path / "proj"
    project.mkdir(exist_ok=True)
    (project / "usermodel.py").write_text(
        "import torch\nfrom userhelp import WIDTH\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(WIDTH, 2)\n"
    )
    (project / "userhelp.py").write_text("WIDTH = 4\n")
    (project / "train.py").write_text("print('train')\n")
    (project / "export.py").write_text(EXPORT)
    out = tmp_path / f"out-{which}"
    done = subprocess.run(
        [sys.executable, "export.py", which, str(out)],
        capture_output=True,
        text=True,
        cwd=project,
        env=clean_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    custom = out / "j" / "app_server" / "custom"
    return (
        sorted(str(p.relative_to(custom)) for p in custom.rglob("*.py")) if custom.is_dir() else []
    )


def test_a_torch_model_ships_no_copy_of_torch(tmp_path: Path) -> None:
    # FLARE copied torch, numpy, sympy… (1,300 files, ~17 s) into custom/ for a torch.nn model
    assert _export(tmp_path, "torch") == []


def test_the_users_model_module_and_its_sibling_import_are_shipped(tmp_path: Path) -> None:
    assert _export(tmp_path, "user") == ["userhelp.py", "usermodel.py"]
