"""Training settings that are not parallelism knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Dtype = Literal["bf16", "fp16", "fp8"]
Framework = Literal["megatron", "fsdp", "deepspeed", "maxtext"]
AttentionImpl = Literal["flash", "unfused"]


class TrainingSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: int = Field(4096, ge=1, le=100_000_000)
    global_batch: int = Field(..., ge=1, le=1_000_000_000, description="sequences per optimizer step")
    dtype: Dtype = Field("bf16", description="compute dtype; fp8 runs GEMMs in FP8 with bf16 elsewhere")
    optimizer: Literal["adam"] = "adam"
    framework: Framework = Field(
        "megatron",
        description="whose memory/overlap behaviour to model: megatron (fp32 grad buffers, distributed "
        "optimizer), fsdp (torchtitan/llm-foundry), deepspeed, maxtext",
    )
    attention_impl: AttentionImpl = Field(
        "flash",
        description="flash: fused attention, no s x s matrix (Dao et al. 2022, arXiv 2205.14135); unfused: "
        "scores materialised and softmax/dropout memory-bound, as in every stack before mid-2022",
    )
