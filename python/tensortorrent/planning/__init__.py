"""Planning: where each region runs, the schedule that runs them, and the direct path."""

from .plan import ExecutionPlan, build_plan, plan_from_json, plan_to_json

__all__ = ["ExecutionPlan", "build_plan", "plan_from_json", "plan_to_json"]
