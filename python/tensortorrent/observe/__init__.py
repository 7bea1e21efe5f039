"""Observability: compile progress, explain() reports and traces."""
