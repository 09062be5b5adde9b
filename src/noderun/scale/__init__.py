"""``noderun scale``: sweeps over nodes x processes, speedup and efficiency per point."""

from noderun.scale.analysis import Point, PointResult, ScalingRow, plan_points, scaling_rows

__all__ = ["Point", "PointResult", "ScalingRow", "plan_points", "scaling_rows"]
