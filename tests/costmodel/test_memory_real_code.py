"""The planner's activation and loss memory terms held against torchtitan 0.3.0's real Llama 3 model, run on CPU.

Method (as in the project's reference study of torchtitan 0.3.0's memory, repeated here at small dims so it runs in
CI): torchtitan's own `Llama3Model` built with its `_build_llama3_layers` helper (fused wqkv, ComplexRoPE,
`nn.RMSNorm`, SwiGLU `FeedForward`, untied `lm_head`), parameters cast to bf16 (what FSDP2's
MixedPrecisionPolicy(param_dtype=bf16) computes with). A `TorchDispatchMode` registers every storage an op creates
(views of existing storages excluded) and a weakref finalizer unregisters it when freed; parameter gradients are
dropped as soon as accumulated (FSDP2 frees the unsharded gradient after its reduce-scatter). Per layer = the live
bytes a steady-state block adds over its forward (its saved tensors and its output, the next block's input), per token.

CPU vs GPU (the GPU-equivalent variant, used for every comparison):
- RMSNorm: on CUDA `rms_norm` dispatches to `aten::_fused_rms_norm` whose backward keeps (input, rstd, weight)
  (torch 2.13 native_functions.yaml / derivatives.yaml); on CPU the composite keeps an fp32 copy of the input and
  the fp32 normalised product (8 B per element instead of 2). `_GpuRMSNorm` saves exactly what the CUDA op saves.
- Attention: torchtitan 0.3.0 offers only flex and varlen to language models and FlexAttention has no CPU backward,
  so each layer's inner attention is torchtitan's `ScaledDotProductAttention`; on CPU SDPA runs
  `_scaled_dot_product_flash_attention_for_cpu`, which saves the same set as CUDA flash / cuDNN SDPA (q, k, v with
  n_kv heads, out, fp32 logsumexp). torchtitan's SAC save list names the CUDA SDPA ops but not the CPU one, so the
  GPU-equivalent SAC adds it through `SelectiveAC.get_save_ops`, torchtitan's documented hook.
- Fused loss: flash-attn's cross entropy (the planner's `fused_cross_entropy`) is a Triton GPU kernel; `_FusedCE`
  keeps what it keeps (the bf16 logits and an fp32 logsumexp per row) and writes a bf16 gradient block by block.
"""

from __future__ import annotations

import weakref

import pytest

pytestmark = pytest.mark.consumers  # torch + torchtitan, real code: CI runs it with -m "slow or consumers"

torch = pytest.importorskip("torch")
pytest.importorskip("torchtitan")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from planner.costmodel.memory import activation_elems_per_token, logits_bytes_per_token  # noqa: E402
from planner.specs import ModelSpec, TrainingSpec  # noqa: E402

# small GQA shape: dim 256, 8 heads / 2 kv heads (head_dim 32), SwiGLU ffn 768, vocab 2048, 2 x 256 tokens
DIM, HEADS, KV, FFN, VOCAB, BATCH, SEQ = 256, 8, 2, 768, 2048, 2, 256
TOKENS = BATCH * SEQ
LAYERS = 3


def _model_spec() -> ModelSpec:
    from planner.catalog.hf_import import from_hf_config

    return from_hf_config({
        "model_type": "llama", "hidden_size": DIM, "num_attention_heads": HEADS, "num_key_value_heads": KV,
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, "vocab_size": VOCAB, "hidden_act": "silu",
        "tie_word_embeddings": False, "max_position_embeddings": 4096,
    }, name="tiny-llama")


class _Live(TorchDispatchMode):
    """Live storages created by ops (views excluded), with the running and peak total in bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.cur = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        self.cur -= self.live.pop(key, 0)

    def reset_peak(self) -> None:
        self.peak = self.cur

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            key = s._cdata
            if key in inputs or key in self.live or s.nbytes() == 0:
                continue
            self.live[key] = s.nbytes()
            self.cur += s.nbytes()
            self.peak = max(self.peak, self.cur)
            weakref.finalize(s, self._release, key)
        return out


class _GpuRMSNormFn(torch.autograd.Function):
    """What CUDA's aten::_fused_rms_norm keeps for backward: (input, rstd, weight)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, g):
        x, rstd, w = ctx.saved_tensors
        xf, gf = x.float(), (g * w).float()
        n = xf * rstd
        dx = rstd * (gf - n * (gf * n).mean(-1, keepdim=True))
        dw = (g.float() * n).sum(dim=tuple(range(g.dim() - 1)))
        return dx.to(x.dtype), dw.to(w.dtype), None


def _gpu_rmsnorm_forward(self, x):
    return _GpuRMSNormFn.apply(x, self.weight, self.eps or 1e-5)


def _build(layers: int = LAYERS):
    import torchtitan.models.llama3 as llama3
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention

    orig = llama3.get_attention_config
    llama3.get_attention_config = lambda backend: ScaledDotProductAttention.Config()
    try:
        cfg = llama3.Llama3Model.Config(
            dim=DIM, vocab_size=VOCAB,
            tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
            norm=RMSNorm.Config(normalized_shape=DIM),
            lm_head=Linear.Config(in_features=DIM, out_features=VOCAB),
            layers=llama3._build_llama3_layers(
                n_layers=layers, dim=DIM, n_heads=HEADS, n_kv_heads=KV, hidden_dim=FFN, fuse_qkv=True,
                rope=ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=4096, theta=500000, scaling="llama"),
                attn_backend="sdpa"))
    finally:
        llama3.get_attention_config = orig
    torch.manual_seed(0)
    model = cfg.build()
    for p in model.parameters():  # FSDP2 mixed precision computes with bf16 parameters; buffers (RoPE) stay
        p.data = p.data.to(torch.bfloat16)
        p.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
    for mod in model.modules():
        if isinstance(mod, torch.nn.RMSNorm):
            mod.forward = _gpu_rmsnorm_forward.__get__(mod)
    return model


def _apply_ac(model, mode: str) -> None:
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    class _GpuSelectiveAC(SelectiveAC):
        def get_save_ops(self) -> set:  # + the CPU flash op (the CUDA SDPA ops are in torchtitan's list)
            return super().get_save_ops() | {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}

    if mode == "full":
        FullAC(FullAC.Config()).apply(model)
    elif mode == "selective":
        _GpuSelectiveAC(SelectiveAC.Config()).apply(model)


def _batch():
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))


def measured_layer_bytes_per_token(mode: str) -> float:
    """Live bytes block 1 adds over its forward (block 0's output excluded, its own output included), per token."""
    model = _build()
    _apply_ac(model, mode)
    tracker = _Live()
    marks: dict[str, int] = {}
    for name, blk in model.layers.items():
        blk.register_forward_pre_hook(lambda mod, a, n=name: marks.__setitem__(n, tracker.cur))
    tokens, _ = _batch()
    with tracker:
        out = model(tokens)
        assert out.requires_grad
    return (marks["2"] - marks["1"]) / TOKENS


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return _model_spec()


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_layer_activations_match_torchtitan(spec, mode):
    planner = 2.0 * activation_elems_per_token(spec, False, 1, False, mode, "fsdp")
    measured = measured_layer_bytes_per_token(mode)
    print(f"layer {mode}: planner {planner:.0f} B/token, torchtitan {measured:.0f}")
    assert planner == pytest.approx(measured, rel=0.03), (mode, planner, measured)


_ROWS = 4  # rows per block of the fused loss: its fp32 temporaries stay under 1% of the logits


class _FusedCE(torch.autograd.Function):
    """flash-attn's fused cross entropy memory contract: saves the bf16 logits and an fp32 logsumexp per row, writes
    a bf16 gradient (computed here row block by row block, as its kernel does, so no full fp32 copy exists)."""

    @staticmethod
    def forward(ctx, logits, labels):
        lse = torch.cat([torch.logsumexp(c.float(), -1) for c in logits.split(_ROWS)])
        ctx.save_for_backward(logits, lse, labels)
        picked = logits.gather(1, labels[:, None]).squeeze(1).float()
        return (lse - picked).sum()

    @staticmethod
    def backward(ctx, g):
        logits, lse, labels = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for i in range(0, logits.shape[0], _ROWS):
            blk = torch.exp(logits[i:i + _ROWS].float() - lse[i:i + _ROWS, None])
            blk[torch.arange(blk.shape[0]), labels[i:i + _ROWS]] -= 1.0
            grad[i:i + _ROWS] = (blk * g).to(grad.dtype)
        return grad, None


def measured_loss_bytes(variant: str) -> float:
    """Loss-phase peak (from the end of the forward until the final norm's backward starts) less what the model
    keeps at the end of its forward, per token: what the planner's loss term stands for."""
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

    model = _build(layers=1)
    tracker = _Live()
    tokens, labels = _batch()
    done: dict[str, int] = {}

    def _at_final_norm(*_args) -> None:
        done.setdefault("peak", tracker.peak)

    model.norm.register_full_backward_pre_hook(_at_final_norm)
    with tracker:
        if variant == "chunked":
            model._skip_lm_head = True
            loss_fn = ChunkedLossWrapper(ChunkedLossWrapper.Config())
            loss_fn.set_lm_head(model.lm_head)
            pred = model(tokens)
            base = tracker.cur
            tracker.reset_peak()
            loss, _ = loss_fn(pred, labels)
        else:
            pred = model(tokens)
            base = tracker.cur - pred.untyped_storage().nbytes()  # the trainer deletes pred after the loss
            tracker.reset_peak()
            if variant == "plain":
                loss, _ = CrossEntropyLoss(CrossEntropyLoss.Config())(pred, labels)
            else:
                loss = _FusedCE.apply(pred.flatten(0, 1), labels.flatten())
        del pred
        loss.backward()
    return (done["peak"] - base) / TOKENS


@pytest.mark.parametrize("variant", ["plain", "chunked", "fused"])
def test_loss_term_matches_torchtitan(spec, variant):
    train = TrainingSpec(global_batch=BATCH, seq_len=SEQ, framework="fsdp",
                         loss_chunks=8 if variant == "chunked" else 1, fused_cross_entropy=variant == "fused")
    planner = logits_bytes_per_token(spec, 1, train)
    measured = measured_loss_bytes(variant)
    print(f"loss {variant}: planner {planner:.0f} B/token, torchtitan {measured:.0f}")
    assert planner == pytest.approx(measured, rel=0.05), (variant, planner, measured)


def measured_step_peak_bytes(mode: str) -> float:
    """Peak of live activation bytes over one whole step (forward, loss, backward), parameters excluded and their
    gradients dropped as accumulated: what the planner's activations term stands for."""
    from torchtitan.components.loss import CrossEntropyLoss

    model = _build()
    _apply_ac(model, mode)
    tracker = _Live()
    tokens, labels = _batch()
    with tracker:
        pred = model(tokens)
        loss, _ = CrossEntropyLoss(CrossEntropyLoss.Config())(pred, labels)
        del pred
        loss.backward()
    return float(tracker.peak)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_step_activation_peak_matches_torchtitan(spec, mode):
    # the whole step: layers + final norm + the loss, and under full AC max(loss phase, recomputed layer), never both
    from planner.catalog.hardware import parse_cluster
    from planner.costmodel import Context, evaluate
    from planner.specs import ParallelPlan

    ctx = Context(spec, parse_cluster("h100x1"), TrainingSpec(global_batch=BATCH, seq_len=SEQ, framework="fsdp"))
    ev = evaluate(ctx, ParallelPlan(dp=1, zero_stage=3, micro_batch=BATCH, recompute=mode))
    planner = ev.memory["activations_gib"] * 2**30
    measured = measured_step_peak_bytes(mode)
    print(f"step {mode}: planner {planner / 2**20:.2f} MiB, torchtitan {measured / 2**20:.2f} MiB")
    assert planner == pytest.approx(measured, rel=0.05), (mode, planner, measured)


def _profiled_peak_bytes(step) -> int:
    """Peak of the CPU allocator's live bytes while `step()` runs, from the profiler's allocation and free events
    (kineto '[memory]' records, every allocation including those inside DTensor's C++ dispatch and the autograd
    engine, which a TorchDispatchMode does not see), counted from zero at its start."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    return peak


def measured_loss_parallel_bytes_per_logit(variant: str) -> float:
    """Peak bytes per local logit of a vocab-parallel loss, from the LM head's matmul through its backward (the
    trainer deletes the logits after the loss; the head's weight gradient is dropped as FSDP2 reduces it): torch's
    loss_parallel() DTensor handlers as torchtitan 9dec370 ran them (`cross_entropy(pred.flatten(0, 1).float(),
    labels)` inside loss_parallel, pred a Shard(-1) DTensor), or torchtitan 0.3.0's _LossParallelCrossEntropy. One TP
    rank (a 1-rank gloo group): each rank runs the same ops on its vocabulary shard, the all-reduces are over [N, 1]."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel
    from torchtitan.components.loss import _LossParallelCrossEntropy

    g = torch.Generator().manual_seed(0)
    h = torch.randn(TOKENS, DIM, generator=g).to(torch.bfloat16).requires_grad_()
    w = torch.randn(VOCAB, DIM, generator=g).to(torch.bfloat16).requires_grad_()
    w.register_post_accumulate_grad_hook(lambda q: setattr(q, "grad", None))
    labels = torch.randint(0, VOCAB, (TOKENS,), generator=g)
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))

        def step() -> None:
            pred = h @ w.t()
            if variant == "torch_loss_parallel":
                dpred = DTensor.from_local(pred, mesh, [Shard(-1)], run_check=False)
                del pred
                with loss_parallel():
                    loss = F.cross_entropy(dpred.float(), labels)
                    del dpred
                    loss.backward()
            else:
                loss = _LossParallelCrossEntropy.apply(pred.float(), labels, mesh.get_group("tp"), VOCAB, "sum")
                del pred
                loss.backward()

        peak = _profiled_peak_bytes(step)
    finally:
        if owns_group:
            dist.destroy_process_group()
    return peak / (TOKENS * VOCAB)


@pytest.mark.parametrize("variant", ["torch_loss_parallel", "torchtitan_loss_parallel"])
def test_loss_parallel_term_matches_the_real_code(spec, variant):
    # torchtitan with TP > 1 shards the vocabulary and runs a vocab-parallel loss: per local logit the planner counts
    # Stack.loss_parallel_logit_bytes (16 B), the real code's peak within 5% (h's gradient, dim / vocab of it, is in
    # the measurement)
    train = TrainingSpec(global_batch=BATCH, seq_len=SEQ, framework="fsdp")
    tp = 2
    planner = logits_bytes_per_token(spec, tp, train) / (VOCAB / tp)
    measured = measured_loss_parallel_bytes_per_logit(variant)
    print(f"loss parallel {variant}: planner {planner:.2f} B/logit, real code {measured:.2f}")
    assert planner == pytest.approx(measured, rel=0.05), (variant, planner, measured)
    assert planner > logits_bytes_per_token(spec, 1, train) / VOCAB  # the plain loss keeps 12 B, this one 16


def measured_pipeline_receive_buffers(stage_index: int, num_stages: int, microbatches: int) -> tuple[int, int]:
    """(distinct receive buffers, their bytes) torch.distributed.pipelining's PipelineStage (what torchtitan runs)
    allocates for one stage before its first step: the input receive buffers of every micro-batch and the receive
    buffers of its output's gradient. Static shapes, one rank (a 1-rank gloo group holds every stage), no step run."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining._utils import InferenceMode

    boundary = torch.empty(BATCH, SEQ, DIM, dtype=torch.bfloat16, requires_grad=True)  # one micro-batch's activation
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        stage = PipelineStage(torch.nn.Linear(DIM, DIM), stage_index=stage_index, num_stages=num_stages,
                              device=torch.device("cpu"), input_args=(boundary,), output_args=(boundary,))
        stage._inference_mode = InferenceMode.STATIC  # the schedule's warm-up vote picks it for static shapes
        stage._prepare_forward_infra(microbatches, None, has_backward=True)
        stage._prepare_backward_infra(microbatches)
        infos = [i for c in range(microbatches) for i in (*stage.args_recv_info[c], *stage.grad_recv_info[c])]
        storages = {i.buffer.untyped_storage()._cdata: i.buffer.untyped_storage().nbytes() for i in infos
                    if i.buffer is not None}
    finally:
        if owns_group:
            dist.destroy_process_group()
    return len(storages), sum(storages.values())


@pytest.mark.parametrize("stage_index", [0, 1, 2])
def test_pipeline_receive_buffers_match_torch_pipelining(stage_index):
    # the planner's pipeline_buffer_units with nothing in flight is the receive buffers alone: one per micro-batch for
    # the input (all but the first stage) and one for the output's gradient (all but the last), each one boundary
    # activation; the in-flight outputs (fwd_cache) and the overlap with the first layer's saved input come on top
    from planner.costmodel.memory import pipeline_buffer_units

    microbatches = 4
    count, nbytes = measured_pipeline_receive_buffers(stage_index, 3, microbatches)
    units = pipeline_buffer_units(3, 1, stage_index, microbatches, inflight=0.0)
    assert count == units == (4 if stage_index in (0, 2) else 8)
    assert nbytes == units * TOKENS * DIM * 2
