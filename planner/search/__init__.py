"""planner.search.engine: see docs/architecture.md."""
