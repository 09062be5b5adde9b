"""A Lightning script (no noderun import): DDP on CPU, 2 epochs, CSVLogger and checkpoints.

Lightning finds its ranks itself: SLURM variables under srun, torchrun's under
``noderun run``. ``--out DIR`` is where lightning_logs/ (metrics.csv, checkpoints) go.
"""

import argparse
import os
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


parser = argparse.ArgumentParser()
parser.add_argument(
    "--out",
    type=Path,
    default=Path(os.environ.get("NODERUN__RUN_DIR") or os.environ.get("NODERUN_RUN_DIR", ".")),
)
parser.add_argument("--nodes", type=int, default=1)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

generator = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=generator)
data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=32)
trainer = L.Trainer(
    accelerator="cpu",
    devices=args.devices,
    num_nodes=args.nodes,
    strategy="ddp",
    max_epochs=args.epochs,
    logger=CSVLogger(save_dir=args.out),
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Regression(), data)
