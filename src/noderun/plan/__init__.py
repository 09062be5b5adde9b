"""Launch plans: pure descriptions of what to start where."""

from noderun.plan.launch import LaunchPlan, NodeCommand, plan_local, torchrun_argv

__all__ = ["LaunchPlan", "NodeCommand", "plan_local", "torchrun_argv"]
