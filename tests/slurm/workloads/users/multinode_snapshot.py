"""Written like pytorch/examples' distributed/ddp-tutorial-series/multinode.py: a Trainer
class, env:// init, LOCAL_RANK/RANK from torchrun, a snapshot saved by global rank 0 each
epoch and loaded at start when present. --fail-rank R raises on that rank in epoch 1."""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, data, optimizer, snapshot_path, fail_rank):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.data = data
        self.optimizer = optimizer
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        self.fail_rank = fail_rank
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path, weights_only=True)
            self.model.load_state_dict(snapshot["MODEL_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
        self.model = DDP(self.model)

    def _run_epoch(self, epoch):
        self.data.sampler.set_epoch(epoch)
        for source, targets in self.data:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
        if epoch == 1 and self.global_rank == self.fail_rank:
            raise RuntimeError(f"rank {self.global_rank} hit a bad batch")
        print(f"[GPU{self.global_rank}] Epoch {epoch} | loss {loss.item():.4f}", flush=True)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0:
                snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
                torch.save(snapshot, self.snapshot_path)
                print(
                    f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}", flush=True
                )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("total_epochs", type=int)
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--fail-rank", type=int, default=-1)
    args = parser.parse_args()
    init_process_group(backend="gloo")
    print(
        f"world {torch.distributed.get_world_size()} rank {torch.distributed.get_rank()}",
        flush=True,
    )
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = torch.nn.Linear(8, 1)
    trainer = Trainer(
        model, loader, torch.optim.SGD(model.parameters(), lr=0.01), args.snapshot, args.fail_rank
    )
    trainer.train(args.total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
