"""The cost model: one plan -> step time, memory and MFU, as one typed trace of terms.

One module per parallelism's cost (picotron's way): compute (GEMM / attention / elementwise time),
tensor (TP/SP collectives), context (CP ring / all-to-all), expert (EP all-to-all), pipeline (schedule,
bubble, p2p), data (DP / ZeRO / FSDP collectives), optimizer (Adam step, offload), memory (states,
activations, buffers); layers sums them per stage, evaluate orchestrates, trace types the result.
"""

from planner.costmodel.base import Context
from planner.costmodel.evaluate import Evaluation, evaluate
from planner.costmodel.trace import MEMORY_PARTS, TIME_TERMS, CostTrace, Term

__all__ = ["Context", "CostTrace", "Evaluation", "MEMORY_PARTS", "TIME_TERMS", "Term", "evaluate"]
