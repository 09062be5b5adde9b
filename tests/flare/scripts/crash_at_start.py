"""A site script that dies before its first FLARE task (an import it cannot satisfy)."""

import noderun_missing_module  # noqa: F401
