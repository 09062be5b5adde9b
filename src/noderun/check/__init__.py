"""Static checks of hand-written batch scripts (text in, findings out; file checks on request)."""

from noderun.check.sbatch_lint import Finding, Severity, lint_sbatch, script_language

__all__ = ["Finding", "Severity", "lint_sbatch", "script_language"]
