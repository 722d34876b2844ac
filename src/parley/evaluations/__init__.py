"""Evaluations: test suites of scenarios (datasets marked as suites) run against a flow, offline."""
