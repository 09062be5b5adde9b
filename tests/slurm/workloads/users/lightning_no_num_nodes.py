"""Written like a Lightning bug-report model: a BoringModel-style module and a Trainer that
names devices but not num_nodes (so Lightning believes it runs on one node)."""

import sys

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset


class BoringModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


devices = int(sys.argv[1]) if len(sys.argv) > 1 else 2
trainer = Trainer(
    accelerator="cpu",
    devices=devices,
    max_epochs=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(BoringModel(), DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=8))
print(f"lightning world {trainer.world_size} rank {trainer.global_rank}", flush=True)
