"""Which variables are secrets, and how they are shown: never on a command line, masked in
``--dry-run`` output, run.json and noderun's logs. Pure.

A variable is a secret when its name says so (``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET…``,
``DB_PASSWORD``, ``…CREDENTIALS``) or when it was given with ``--env`` (any value)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MASK = "***"


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in WORDS)


def masked(env: Mapping[str, str], also: Collection[str] = ()) -> dict[str, str]:
    """``env`` with the value of every secret (and of every name in ``also``) replaced."""
    return {k: MASK if is_secret(k) or k in also else v for k, v in env.items()}


def masked_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be kept: ``--env K=V`` values and ``SECRET_NAME=value`` words
    masked (``--env K=***``)."""
    out: list[str] = []
    after_env = False
    for word in argv:
        if after_env:
            out.append(_mask_pair(word, always=True))
            after_env = False
        elif word == "--env":
            out.append(word)
            after_env = True
        elif word.startswith("--env="):
            out.append("--env=" + _mask_pair(word[len("--env=") :], always=True))
        else:
            out.append(_mask_pair(word, always=False))
    return out


def _mask_pair(word: str, always: bool) -> str:
    name, eq, _ = word.partition("=")
    if eq and name and (always or (is_secret(name) and name.replace("_", "").isalnum())):
        return f"{name}={MASK}"
    return word
