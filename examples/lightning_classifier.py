"""Lightning on scikit-learn's handwritten digits, launched by noderun (no noderun import needed).

    noderun run --nnodes 2 --nproc-per-node 2 examples/lightning_classifier.py       # this machine
    noderun submit --nodes 2 --nproc-per-node 2 --mode srun examples/lightning_classifier.py

Lightning finds its ranks by itself: torchrun's variables under ``noderun run`` (torchrun mode)
and SLURM's under srun mode. ``num_nodes`` and ``devices`` are read from the same variables, so
they always match the allocation; pass ``--num-nodes``/``--devices`` to pin them, and a value
that contradicts the launcher is refused in one line before Lightning can hang. Metrics go to
Lightning's CSVLogger in the run directory (``$NODERUN__RUN_DIR/lightning_logs/``), where
``noderun verify`` reads them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

import digits  # beside this script: sklearn's digits, sklearn not imported
import torch
from torch import nn
from torch.utils.data import DataLoader

try:
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
except ImportError:  # pragma: no cover - exercised by a test with lightning hidden
    sys.exit(
        "lightning_classifier.py: error: Lightning is not installed; "
        "hint: pip install 'noderun[lightning]' (or pip install 'lightning>=2.6,<2.7')"
    )


class DigitsClassifier(L.LightningModule):
    def __init__(self, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        images, labels = batch
        loss = nn.functional.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        images, labels = batch
        logits = self(images)
        self.log("val_loss", nn.functional.cross_entropy(logits, labels), sync_dist=True)
        accuracy = (logits.argmax(1) == labels).float().mean()
        self.log("val_accuracy", accuracy, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])


def launcher_shape(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(nodes, processes per node) the launcher started, or None for a plain ``python``."""
    if "LOCAL_WORLD_SIZE" in environ and "WORLD_SIZE" in environ:  # torchrun / noderun run
        per_node = int(environ["LOCAL_WORLD_SIZE"])
        return int(environ["WORLD_SIZE"]) // per_node, per_node
    if "SLURM_STEP_ID" in environ and "SLURM_NTASKS" in environ:  # srun, one task per rank
        nodes = int(environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_NNODES", "1"))
        return nodes, int(environ["SLURM_NTASKS"]) // nodes
    return None


def trainer_shape(
    environ: Mapping[str, str], num_nodes: int | None, devices: int | None
) -> tuple[int, int]:
    """num_nodes and devices for the Trainer: the launcher's, and a contradiction is one line."""
    shape = launcher_shape(environ)
    if shape is None:
        return num_nodes or 1, devices or 1
    for name, asked, real in (
        ("--num-nodes", num_nodes, shape[0]),
        ("--devices", devices, shape[1]),
    ):
        if asked is not None and asked != real:
            sys.exit(
                f"lightning_classifier.py: error: {name} {asked} but the launcher started "
                f"{shape[0]} node(s) x {shape[1]} process(es): Lightning would wait for ranks "
                f"that never come; hint: drop {name} (it is read from the launcher) or launch "
                f"{name.lstrip('-').replace('-', '_')}={asked}"
            )
    return shape


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-nodes", type=int, help="default: what the launcher started")
    parser.add_argument("--devices", type=int, help="processes per node; default: the launcher's")
    args = parser.parse_args(argv)

    num_nodes, devices = trainer_shape(os.environ, args.num_nodes, args.devices)
    # noderun's launcher sets NODERUN__RUN_DIR; a plain srun job may export NODERUN_RUN_DIR
    run_dir = os.environ.get("NODERUN__RUN_DIR") or os.environ.get("NODERUN_RUN_DIR", ".")
    L.seed_everything(args.seed, workers=True)
    train, val = digits.datasets(args.seed, 0.2)
    trainer = L.Trainer(
        accelerator="auto",
        devices=devices,
        num_nodes=num_nodes,
        strategy="ddp" if num_nodes * devices > 1 else "auto",
        max_epochs=args.epochs,
        logger=CSVLogger(run_dir, name="lightning_logs"),
        default_root_dir=run_dir,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=10,
    )
    trainer.fit(
        DigitsClassifier(args.lr),
        DataLoader(train, batch_size=args.batch_size, shuffle=True),
        DataLoader(val, batch_size=256),
    )
    if trainer.is_global_zero:
        metrics = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}
        print(f"final: {metrics}", flush=True)


if __name__ == "__main__":
    main()
