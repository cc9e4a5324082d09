"""Validation of emitted launch configs with the real consumer libraries (see docs/launchers.md)."""
