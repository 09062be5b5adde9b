"""The one answer to "are we inside an srun step" (and "in an allocation, outside a step")."""

from __future__ import annotations

import pytest

from noderun.topology import in_slurm_allocation, in_slurm_step

BATCH = {"SLURM_JOB_ID": "12", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}  # DESIGN.md, measured
STEP = {**BATCH, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0"}


@pytest.mark.parametrize(
    ("environ", "step", "allocation"),
    [
        ({}, False, False),
        (BATCH, False, True),  # sbatch script or salloc shell
        (STEP, True, False),
        ({**BATCH, "SLURM_STEPID": "3"}, True, False),  # older SLURM names it so
        ({"SLURM_JOB_ID": ""}, False, False),
    ],
)
def test_step_and_allocation(environ: dict[str, str], step: bool, allocation: bool) -> None:
    assert in_slurm_step(environ) is step
    assert in_slurm_allocation(environ) is allocation
