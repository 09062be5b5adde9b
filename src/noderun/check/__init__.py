"""Static checks of hand-written batch scripts (pure: text in, findings out)."""

from noderun.check.sbatch_lint import Finding, Severity, lint_sbatch

__all__ = ["Finding", "Severity", "lint_sbatch"]
