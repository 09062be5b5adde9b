"""scikit-learn's handwritten digits (1,797 8x8 images) for the examples, read from the file
scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) without importing scikit-learn:
its import costs every rank about a second of start-up, the whole data set loads in 20 ms.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset


def _data_file() -> Path:
    spec = importlib.util.find_spec("sklearn")  # finds the package, imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the digits examples need scikit-learn's data: pip install scikit-learn")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"


def load() -> tuple[np.ndarray, np.ndarray]:
    """(images 1797x8x8 as float 0..16, labels 1797) as ``sklearn.datasets.load_digits`` gives."""
    with gzip.open(_data_file(), "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


def stratified_split(
    labels: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held out) indices: ``fraction`` of every label held out, seeded, shuffled."""
    rng = np.random.default_rng(seed)
    kept, held = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        cut = round(len(members) * fraction)
        held.append(members[:cut])
        kept.append(members[cut:])
    return rng.permutation(np.concatenate(kept)), rng.permutation(np.concatenate(held))


def datasets(seed: int, val_fraction: float) -> tuple[TensorDataset, TensorDataset]:
    """(train, validation): images scaled to [0, 1] with a channel axis, a stratified split."""
    images, labels = load()
    x = torch.tensor(images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(labels)
    train, val = stratified_split(labels, val_fraction, seed)
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])
