"""The digits example's data and model, shared by the job, every site and the benchmark.

Non-IID split by label skew (seeded): a stratified 25% of scikit-learn's 1797 digits is the
held-out test set every model is scored on; of the rest, each digit has a home site (0-4:
site-1, 5-9: site-2) that gets each of its samples with probability ``skew`` (0.9), the other
site the remainder. Each site holds out 20% of its share for local validation.
"""

from __future__ import annotations

import digits  # beside it (examples/digits.py links here), shipped with the job
import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

SITES = ("site-1", "site-2")
SEED = 0
SKEW = 0.9


class Net(nn.Module):
    """A small MLP on 8x8 digits (64 -> 64 -> 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _tensors(images: np.ndarray, labels: np.ndarray) -> TensorDataset:
    return TensorDataset(
        torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)
    )


def split(seed: int = SEED, skew: float = SKEW) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Indices of each site's share of the training pool, and of the held-out test set."""
    _, labels = digits.load()
    pool, test = digits.stratified_split(labels, 0.25, seed)
    rng = np.random.default_rng(seed)
    home = np.where(labels[pool] < 5, 0, 1)
    stays = rng.random(len(pool)) < skew
    owner = np.where(stays, home, 1 - home)
    return {site: pool[owner == i] for i, site in enumerate(SITES)}, test


def site_data(site: str, seed: int = SEED) -> tuple[TensorDataset, TensorDataset]:
    """(train, validation) of ``site``: its share of the pool, 80/20."""
    shares, _ = split(seed)
    images, labels = digits.load()
    share = np.random.default_rng(seed).permutation(shares[site])
    cut = round(len(share) * 0.2)
    val, train = share[:cut], share[cut:]
    return _tensors(images[train], labels[train]), _tensors(images[val], labels[val])


def test_data(seed: int = SEED) -> TensorDataset:
    """The held-out test set, the same for every site and every model."""
    _, test = split(seed)
    images, labels = digits.load()
    return _tensors(images[test], labels[test])


def accuracy(model: nn.Module, dataset: TensorDataset) -> float:
    """Fraction of ``dataset`` that ``model`` labels right."""
    images, labels = dataset.tensors
    model.eval()
    with torch.no_grad():
        correct = (model(images).argmax(1) == labels).sum().item()
    model.train()
    return correct / len(labels)


def label_counts(seed: int = SEED) -> dict[str, list[int]]:
    """How many samples of each digit each site holds (documents the skew)."""
    shares, _ = split(seed)
    _, labels = digits.load()
    return {site: np.bincount(labels[idx], minlength=10).tolist() for site, idx in shares.items()}
