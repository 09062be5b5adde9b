"""Bad input to the FLARE job builder and the site launcher: one line each, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderun.errors import UsageError
from tests.conftest import ROOT, clean_env

EXAMPLE = ROOT / "examples" / "flare" / "digits_fedavg.py"
SCRIPTS = Path(__file__).parent / "scripts"


def _python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=clean_env(**env)
    )


def test_flare_not_installed_is_one_line_with_the_install_command(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "nvflare"
    shadow.mkdir(parents=True)  # an nvflare that cannot be imported, as on a machine without it
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'nvflare'\", name='nvflare')\n"
    )
    out = tmp_path / "out"
    result = _python(
        [str(EXAMPLE), "--out", str(out)],
        tmp_path,
        PYTHONPATH=str(tmp_path / "shadow"),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "UsageError: NVIDIA FLARE is not installed; hint: pip install 'noderun[flare]' "
        "(nvflare>=2.9,<2.10; never nvflare[pt]: it replaces torch)"
    ]
    assert not out.exists()


def test_missing_site_script_refused_before_anything(tmp_path: Path) -> None:
    import torch

    from noderun.flare import FedAvgJob, Site

    with pytest.raises(UsageError) as err:
        FedAvgJob(
            "j",
            model=torch.nn.Linear(2, 2),
            script=SCRIPTS / "plain_ddp_site.py",
            sites=[Site("site-1"), Site("site-2", script=str(tmp_path / "nope.py"))],
        )
    assert "site site-2: training script" in str(err.value) and "nope.py" in str(err.value)
    assert "\n" not in str(err.value)


def test_more_ranks_than_this_machine_has_starts_no_simulation(tmp_path: Path) -> None:
    import torch

    from noderun.flare import FedAvgJob, Site

    too_many = (os.cpu_count() or 1) + 1
    job = FedAvgJob(
        "j",
        model=torch.nn.Linear(2, 2),
        script=SCRIPTS / "plain_ddp_site.py",
        sites=[Site("site-1", nnodes=2, nproc_per_node=too_many), Site("site-2")],
    )
    with pytest.raises(UsageError) as err:
        job.simulate(tmp_path / "ws")
    assert f"site site-1 asks for {too_many} processes per node" in str(err.value)
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nproc-per-node", "999"], "asks for 999 processes per node"),
        (["--launcher", "slurm", "--nnodes", "2"], "not inside a SLURM allocation"),
        ([], "script 'missing.py' not found"),
    ],
)
def test_site_launch_refuses_in_one_line_and_starts_nothing(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    script = "missing.py" if not args else str(SCRIPTS / "plain_ddp_site.py")
    result = _python(
        ["-m", "noderun.flare.site_launch", "--site", "site-1", *args, script], tmp_path
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr
    assert result.stderr.startswith("noderun: error: ") and "hint:" in result.stderr
    assert not (tmp_path / "runs").exists()
