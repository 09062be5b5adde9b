"""Federated digits: FedAvg over 2 label-skewed sites, site-1 a 2-node x 2-process DDP job.

    python examples/flare/digits_fedavg.py                    # FLARE simulator (SimEnv)
    python examples/flare/digits_fedavg.py --env poc          # FLARE POC: real server + clients
    python examples/flare/digits_fedavg.py --env export       # only write the FLARE job folder
    python examples/flare/digits_fedavg.py --site1-launcher slurm   # inside salloc/sbatch -N2

Writes to --out: ``global_accuracy.csv`` and ``global_accuracy.png`` (the global model on the
held-out test set after every round), ``summary.json`` (federated vs each site trained alone
for the same number of epochs on its own share), the FLARE workspace and job folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch
from digits_data import SITES, Net, accuracy, label_counts, site_data, test_data

import noderun
from noderun.flare import FedAvgJob, Site

HERE = Path(__file__).resolve().parent


def build_job(args: argparse.Namespace) -> FedAvgJob:
    common = f"--epochs {args.epochs} --lr {args.lr}"
    return FedAvgJob(
        "digits",
        model=Net(),
        script=HERE / "digits_site.py",
        files=[HERE / "digits_data.py", HERE / "digits.py"],
        num_rounds=args.rounds,
        sites=[
            Site(
                "site-1",
                nnodes=2,
                nproc_per_node=2,
                launcher=args.site1_launcher,
                args=f"--site site-1 {common} --eval-csv {args.out / 'site-1.csv'}",
            ),
            Site("site-2", args=f"--site site-2 {common} --eval-csv {args.out / 'site-2.csv'}"),
        ],
    )


def train_alone(site: str, epochs: int, lr: float) -> float:
    """The same model and optimizer on one site's share only; held-out test accuracy."""
    torch.manual_seed(0)
    train, _ = site_data(site)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loader = torch.utils.data.DataLoader(train, batch_size=16, shuffle=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        for images, labels in loader:
            optimizer.zero_grad()
            loss_fn(model(images), labels).backward()
            optimizer.step()
    return accuracy(model, test_data())


def global_curve(out: Path, result: Path) -> list[tuple[int, float]]:
    """Global test accuracy after 0..R rounds: what the sites measured on the model they
    received, then the final model the server saved."""
    with (out / "site-1.csv").open() as f:
        rows = [(int(r["round"]), float(r["accuracy"])) for r in csv.DictReader(f)]
    final = next(result.rglob("FL_global_model.pt"))
    model = Net()
    state = torch.load(final, weights_only=True)
    model.load_state_dict(state.get("model", state))
    return [*rows, (len(rows), accuracy(model, test_data()))]


def write_outputs(out: Path, curve: list[tuple[int, float]], alone: dict[str, float]) -> None:
    with (out / "global_accuracy.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rounds_aggregated", "global_test_accuracy"])
        writer.writerows(curve)
    summary = {
        "federated": curve[-1][1],
        **{f"{site}_alone": acc for site, acc in alone.items()},
        "label_counts": label_counts(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r for r, _ in curve], [a for _, a in curve], marker="o", label="FedAvg global model")
    for (site, acc), style in zip(alone.items(), ("--", ":"), strict=True):
        ax.axhline(acc, linestyle=style, color="grey", label=f"{site} alone")
    ax.set_xlabel("FL rounds aggregated")
    ax.set_ylabel("held-out test accuracy")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    ax.set_title("digits, label-skewed sites (site-1: 2 nodes x 2 ranks)")
    fig.tight_layout()
    fig.savefig(out / "global_accuracy.png", dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--env", choices=["sim", "poc", "export"], default="sim")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2, help="local epochs per round")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--site1-launcher", choices=["local", "slurm"], default="local")
    parser.add_argument("--out", type=Path, default=Path("runs/flare-digits"))
    args = parser.parse_args()
    args.out = args.out.resolve()
    job = build_job(args)  # checks every input first: nothing written when one is wrong
    print(job.table(), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for site in SITES:
        (args.out / f"{site}.csv").unlink(missing_ok=True)
    if args.env == "export":
        print(f"job folder: {job.export(args.out / 'jobs')}")
        return
    if args.env == "sim":
        result = job.simulate(args.out / "workspace")
    else:
        status, poc_result = job.poc()
        print(f"POC job status: {status}")
        if poc_result is None:
            raise SystemExit(f"POC job ended without a result ({status})")
        result = poc_result
    curve = global_curve(args.out, result)
    alone = {site: train_alone(site, args.rounds * args.epochs, args.lr) for site in SITES}
    write_outputs(args.out, curve, alone)
    print(f"global test accuracy by round: {[round(a, 3) for _, a in curve]}")
    print(
        f"federated {curve[-1][1]:.3f} vs "
        + ", ".join(f"{site} alone {acc:.3f}" for site, acc in alone.items())
    )


if __name__ == "__main__":
    sys.exit(noderun.run_main(main))
