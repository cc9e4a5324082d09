"""planner: an auto-parallel planner for large-model training."""

__version__ = "0.1.0"
