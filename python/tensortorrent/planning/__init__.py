"""Planning: where each region runs, the schedule that runs them, and the direct path."""

from .plan import ExecutionPlan, build_plan

__all__ = ["ExecutionPlan", "build_plan"]
