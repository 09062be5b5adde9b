"""NVIDIA FLARE sites whose training is a noderun job: job builder and rank-aware client.

    from noderun.flare import FedAvgJob, FederatedSite, Site

The job side (``FedAvgJob``) needs ``noderun[flare]`` (nvflare>=2.9,<2.10); importing this
package does not import nvflare.
"""

from __future__ import annotations

from typing import Any

from noderun.flare.sites import Site, site_table

__all__ = ["FedAvgJob", "FederatedSite", "Site", "require_nvflare", "site_table", "unwrap"]


def __getattr__(name: str) -> Any:
    # nvflare and torch load only when the job builder or the client is used
    if name in ("FedAvgJob", "require_nvflare"):
        from noderun.flare import job

        return getattr(job, name)
    if name in ("FederatedSite", "unwrap"):
        from noderun.flare import client

        return getattr(client, name)
    raise AttributeError(name)
