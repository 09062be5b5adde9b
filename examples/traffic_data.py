"""A seeded, realistic traffic-speed series: loop detectors along one freeway corridor.

``generate_speeds(TrafficConfig(sensors=8, days=28, seed=0))`` returns an array of shape
``(days * 24 * 60 / interval_min, sensors)`` in mph, sensor 0 upstream. What shapes it:

- free-flow speed per sensor, 62-70 mph, a little faster at night;
- weekday rush hours: a morning dip around 07:45 and a deeper evening dip around 17:15, each
  a smooth bell (depth 12-35 mph) whose size varies from day to day; the congestion wave
  reaches downstream sensors a few minutes later; Fridays start the evening rush earlier;
- weekends: one shallow midday dip (shopping/leisure traffic);
- incidents: random sudden drops of 30-70 % lasting 15-90 min with a linear recovery, more
  likely in rush hours, spilling back to the upstream neighbour 10 min later at 60 % severity;
- noise: AR(1) sensor noise (phi 0.7, 1.5 mph) plus 0.8 mph white noise, clipped to 3-80 mph.

Same config, same numbers, on every machine: only numpy's seeded Generator is used.
``windows`` turns the series into (history -> speed ``horizon`` steps later) samples.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import NDArray

MINUTES_PER_DAY = 24 * 60


@dataclasses.dataclass(frozen=True)
class TrafficConfig:
    sensors: int = 8
    days: int = 28
    interval_min: int = 5
    seed: int = 0

    @property
    def steps(self) -> int:
        return self.days * MINUTES_PER_DAY // self.interval_min

    @property
    def steps_per_day(self) -> int:
        return MINUTES_PER_DAY // self.interval_min


def _bell(minutes: NDArray[np.float64], center: float, width: float) -> NDArray[np.float64]:
    return np.exp(-0.5 * ((minutes - center) / width) ** 2)


def _rush_dips(cfg: TrafficConfig, rng: np.random.Generator) -> NDArray[np.float64]:
    """Speed lost to daily/weekly demand, shape (steps, sensors)."""
    per_day = cfg.steps_per_day
    minute = np.arange(per_day, dtype=np.float64) * cfg.interval_min
    am_depth = rng.uniform(12, 28, cfg.sensors)
    pm_depth = rng.uniform(18, 35, cfg.sensors)
    weekend_depth = rng.uniform(4, 12, cfg.sensors)
    lag = np.arange(cfg.sensors) * rng.uniform(2, 5)  # minutes the wave needs per sensor
    dips = np.zeros((cfg.steps, cfg.sensors))
    for day in range(cfg.days):
        weekday = day % 7  # day 0 is a Monday
        day_scale = rng.lognormal(0.0, 0.15)
        rows = slice(day * per_day, (day + 1) * per_day)
        for s in range(cfg.sensors):
            jitter = rng.lognormal(0.0, 0.08)
            if weekday < 5:
                pm_center = 16 * 60 + 45 if weekday == 4 else 17 * 60 + 15
                am = am_depth[s] * _bell(minute, 7 * 60 + 45 + lag[s], 50)
                pm = pm_depth[s] * _bell(minute, pm_center + lag[s], 65)
                dips[rows, s] = day_scale * jitter * (am + pm)
            else:
                dips[rows, s] = (
                    day_scale * jitter * weekend_depth[s] * _bell(minute, 13.5 * 60, 120)
                )
    return dips


def _incidents(cfg: TrafficConfig, rng: np.random.Generator) -> NDArray[np.float64]:
    """Fraction of speed lost to incidents, shape (steps, sensors), values in [0, 0.7]."""
    loss = np.zeros((cfg.steps, cfg.sensors))
    per_day = cfg.steps_per_day
    for day in range(cfg.days):
        for s in range(cfg.sensors):
            for _ in range(rng.poisson(0.25)):
                rush = rng.random() < 0.6
                center = rng.choice([8 * 60, 17 * 60]) if rush else rng.uniform(0, MINUTES_PER_DAY)
                start_min = float(np.clip(center + rng.normal(0, 60), 0, MINUTES_PER_DAY - 1))
                length = int(rng.uniform(15, 90) // cfg.interval_min) + 1
                severity = rng.uniform(0.3, 0.7)
                start = day * per_day + int(start_min // cfg.interval_min)
                shape = np.ones(length)
                recovery = max(length // 3, 1)
                shape[-recovery:] = np.linspace(1.0, 0.0, recovery + 1)[1:]
                _add(loss, start, s, severity * shape)
                if s > 0:  # the queue spills back upstream
                    delay = 10 // cfg.interval_min
                    _add(loss, start + delay, s - 1, 0.6 * severity * shape)
    return np.minimum(loss, 0.7)


def _add(loss: NDArray[np.float64], start: int, sensor: int, values: NDArray[np.float64]) -> None:
    end = min(start + len(values), loss.shape[0])
    if start < end:
        loss[start:end, sensor] = np.maximum(loss[start:end, sensor], values[: end - start])


def _noise(cfg: TrafficConfig, rng: np.random.Generator) -> NDArray[np.float64]:
    phi, sigma = 0.7, 1.5
    shocks = rng.normal(0, sigma * np.sqrt(1 - phi**2), (cfg.steps, cfg.sensors))
    ar = np.zeros_like(shocks)
    for t in range(1, cfg.steps):
        ar[t] = phi * ar[t - 1] + shocks[t]
    return ar + rng.normal(0, 0.8, (cfg.steps, cfg.sensors))


def generate_speeds(cfg: TrafficConfig = TrafficConfig()) -> NDArray[np.float32]:
    """Speeds in mph, shape (cfg.steps, cfg.sensors); deterministic for a given config."""
    if cfg.sensors < 1 or cfg.days < 1 or MINUTES_PER_DAY % cfg.interval_min:
        raise ValueError(f"bad traffic config {cfg}: sensors, days >= 1; interval divides 1440")
    rng = np.random.default_rng(cfg.seed)
    free_flow = rng.uniform(62, 70, cfg.sensors)
    minute = (np.arange(cfg.steps) * cfg.interval_min) % MINUTES_PER_DAY
    night = 2.0 * _bell(minute.astype(np.float64), 3 * 60, 120)[:, None]
    base = free_flow[None, :] + night - _rush_dips(cfg, rng)
    speeds = base * (1.0 - _incidents(cfg, rng)) + _noise(cfg, rng)
    return np.clip(speeds, 3.0, 80.0).astype(np.float32)


def time_features(cfg: TrafficConfig) -> NDArray[np.float32]:
    """Per step: sin/cos of time of day, sin/cos of day of week, weekend flag; shape (steps, 5)."""
    t = np.arange(cfg.steps) * cfg.interval_min
    day_angle = 2 * np.pi * (t % MINUTES_PER_DAY) / MINUTES_PER_DAY
    week_angle = 2 * np.pi * (t % (7 * MINUTES_PER_DAY)) / (7 * MINUTES_PER_DAY)
    weekend = ((t // MINUTES_PER_DAY) % 7 >= 5).astype(np.float64)
    features = [np.sin(day_angle), np.cos(day_angle), np.sin(week_angle), np.cos(week_angle)]
    return np.stack([*features, weekend], axis=1).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Windows:
    """Samples: ``inputs`` (n, history + 5) scaled, ``targets`` (n,) mph, ``last`` (n,) mph."""

    inputs: NDArray[np.float32]
    targets: NDArray[np.float32]
    last: NDArray[np.float32]


SPEED_CENTER, SPEED_SCALE = 50.0, 15.0


def windows(
    speeds: NDArray[np.float32],
    features: NDArray[np.float32],
    history: int,
    horizon: int,
    steps: range,
) -> Windows:
    """For every sensor and every end step ``t`` in ``steps``: the last ``history`` speeds (scaled)
    and the time features of ``t`` -> the speed at ``t + horizon``. ``last`` is the speed at
    ``t``: the persistence forecast."""
    ends = np.array([t for t in steps if t >= history - 1 and t + horizon < len(speeds)])
    offsets = np.arange(-history + 1, 1)
    inputs, targets, last = [], [], []
    for s in range(speeds.shape[1]):
        past = speeds[ends[:, None] + offsets[None, :], s]
        inputs.append(np.concatenate([(past - SPEED_CENTER) / SPEED_SCALE, features[ends]], 1))
        targets.append(speeds[ends + horizon, s])
        last.append(speeds[ends, s])
    return Windows(
        np.concatenate(inputs).astype(np.float32),
        np.concatenate(targets).astype(np.float32),
        np.concatenate(last).astype(np.float32),
    )


def train_val(
    cfg: TrafficConfig, history: int = 12, horizon: int = 3, val_days: int | None = None
) -> tuple[Windows, Windows]:
    """A chronological split: the last ``val_days`` (default 20 %) are for validation only."""
    speeds = generate_speeds(cfg)
    features = time_features(cfg)
    val_days = val_days if val_days is not None else max(1, cfg.days // 5)
    if val_days >= cfg.days:
        raise ValueError(f"val_days={val_days} leaves no training days out of {cfg.days}")
    cut = (cfg.days - val_days) * cfg.steps_per_day
    train = windows(speeds, features, history, horizon, range(0, cut - horizon))
    val = windows(speeds, features, history, horizon, range(cut, cfg.steps))
    return train, val
