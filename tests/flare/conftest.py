"""FLARE tests need NVIDIA FLARE (the optional extra noderun[flare]): without it they skip with
the reason, except the ones that check what noderun says when it is missing."""

from __future__ import annotations

import pytest


def _nvflare_missing() -> str | None:
    try:
        import nvflare  # noqa: F401
    except ImportError as err:
        return f"NVIDIA FLARE is not installed ({err}); pip install 'noderun[flare]'"
    return None


WITHOUT_NVFLARE = {"test_flare_not_installed_is_one_line_with_the_install_command"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = _nvflare_missing()
    if why is None:
        return
    here = str(config.rootpath / "tests" / "flare")
    for item in items:
        if (
            str(item.path).startswith(here)
            and getattr(item, "originalname", item.name) not in WITHOUT_NVFLARE
        ):
            item.add_marker(pytest.mark.skip(reason=why))
