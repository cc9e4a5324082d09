"""The cost model: one plan -> step time, memory and MFU."""
