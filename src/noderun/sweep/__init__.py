"""Sweeps: a grid of points, each one run in a directory of its own, run at most P at once
(``noderun sweep``; ``noderun scale`` is a sweep over nodes x processes)."""
