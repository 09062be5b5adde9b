"""Launch plans: pure descriptions of what to start where."""

from noderun.plan.launch import Gang, LaunchPlan, NodeCommand, plan_local, torchrun_argv

__all__ = ["Gang", "LaunchPlan", "NodeCommand", "plan_local", "torchrun_argv"]
