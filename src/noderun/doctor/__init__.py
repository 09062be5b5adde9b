"""``noderun doctor``: is this machine, or every node of an allocation, fit for a run?"""
