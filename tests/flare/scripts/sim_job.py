"""A two-site FedAvg job in FLARE's simulator, sites given on the command line (tests).

sim_job.py WORKSPACE SITE1_SCRIPT SITE1_NODES SITE2_SCRIPT [ROUNDS [cse]]
("cse": FLARE's cross-site evaluation after training: submit_model and validate tasks)
"""

import sys

import torch

from noderun.flare import FedAvgJob, Site
from noderun.runtime.entry import run_main


def main() -> None:
    workspace, script1, nodes1, script2, *rest = sys.argv[1:]
    job = FedAvgJob(
        "sim",
        model=torch.nn.Linear(4, 2),
        script=script1,
        num_rounds=int(rest[0]) if rest else 2,
        sites=[Site("site-1", nnodes=int(nodes1)), Site("site-2", script=script2)],
    )
    if rest[1:] == ["cse"]:
        from nvflare.recipe.utils import add_cross_site_evaluation

        add_cross_site_evaluation(job.recipe)
    print(job.table(), flush=True)
    print(f"RESULT {job.simulate(workspace)}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
