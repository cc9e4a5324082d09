"""MaxText's capacity-factor MoE (dense_matmul) as XLA compiles it: the backward of the dispatch and combine einsums
is 3 GEMMs of the forward's 2 (planner.costmodel.moe.EINSUM_DISPATCH_GEMMS), because the dispatch mask is a boolean
cast of the combine mask and carries no gradient. Measured on XLA's compiled FLOPs (jax on CPU, cost_analysis) of a
layer written the way MaxText's layers/moe.py writes it (generate_masks, dense_matmul's einsums); the installed
MaxText's own source is read (not imported: its moe.py needs aqt) for the boolean cast."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from planner.costmodel.moe import EINSUM_DISPATCH_GEMMS

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.slow

B, S, M, H, E, K, CF = 2, 256, 128, 256, 8, 2, 1.25  # sequences, tokens, emb, expert mlp, experts, top-k, capacity
C = int(max(math.ceil(S * K / E) * CF, CF))  # slots per expert and sequence (generate_masks): 80


def _masks(top_idx, weights):
    """Each routed copy's 1-based slot in its expert's capacity buffer (a running count over the sequence), copies
    beyond C dropped; combine mask = routing weight x one-hot slot, dispatch mask = its boolean cast."""
    onehot = jax.nn.one_hot(top_idx, E, dtype=jnp.int32).reshape(B, S * K, E)
    slot = (jnp.cumsum(onehot, axis=1) * onehot).reshape(B, S, K, E).sum(2)
    kept = (slot > 0) & (slot <= C)
    combine = ((weights * kept)[..., None] * jax.nn.one_hot(jnp.where(kept, slot, 0), C + 1, dtype=weights.dtype))
    combine = combine[..., 1:]
    return combine.astype(bool), combine


def _layer(x, w_gate, w0, w1, wo):
    top_w, top_idx = jax.lax.top_k(x @ w_gate, K)
    top_w = jax.nn.softmax(top_w.astype(jnp.float32), -1).astype(x.dtype)
    weights = jnp.zeros((B, S, E), x.dtype).at[jnp.arange(B)[:, None, None], jnp.arange(S)[:, None], top_idx].set(top_w)
    dispatch_mask, combine_mask = _masks(top_idx, weights)
    d = jnp.einsum("BSM,BSEC -> EBCM", x, dispatch_mask)
    h = jax.nn.silu(jnp.einsum("EBCM,EMH -> EBCH", d, w0)) * jnp.einsum("EBCM,EMH -> EBCH", d, w1)
    return jnp.einsum("EBCM,BSEC -> BSM", jnp.einsum("EBCH,EHM -> EBCM", h, wo), combine_mask)


def _flops(fn) -> float:
    args = [jnp.ones(s, jnp.bfloat16) for s in ((B, S, M), (M, E), (E, M, H), (E, M, H), (E, H, M))]
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


def test_maxtext_builds_the_dispatch_mask_as_a_boolean_cast():
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("maxtext is not installed")
    src = (Path(list(spec.submodule_search_locations)[0]) / "layers" / "moe.py").read_text()
    body = src[src.index("def generate_masks(self"):]
    body = body[:body.index("return dispatch_mask, combine_mask")]
    assert "dispatch_mask = combine_mask.astype(bool)" in body


def test_maxtext_dispatch_backward_is_one_gemm_in_xla():
    """Forward: 2 einsums of 2 B S E C M FLOPs, the experts' 3 GEMMs over E x B x C rows, the router. Backward (XLA:
    776.2 MFLOP): 3 einsums + 2 x (experts + router) = 757.1 MFLOP, the rest elementwise (masks, softmax, SiLU);
    4 einsums would be 841.0."""
    einsum, experts, router = 2 * B * S * E * C * M, 3 * 2 * E * B * C * M * H, 2 * B * S * M * E
    fwd = _flops(lambda *a: jnp.sum(_layer(*a) ** 2))
    both = _flops(jax.grad(lambda *a: jnp.sum(_layer(*a) ** 2), argnums=(0, 1, 2, 3, 4)))
    assert fwd == pytest.approx(EINSUM_DISPATCH_GEMMS["fwd"] * einsum + experts + router, rel=0.04)
    counted = EINSUM_DISPATCH_GEMMS["bwd"] * einsum + 2 * (experts + router)
    assert both - fwd == pytest.approx(counted, rel=0.04)
    assert both - fwd < counted + 0.5 * einsum  # a fourth einsum (the dispatch mask's gradient) is not there


def test_custom_remat_recomputes_dispatch_experts_and_router_not_the_combine():
    """jax.checkpoint keeping only the layer's input (MaxText remat_policy custom with the MoE names at 'remat'): the
    backward re-runs the router, the dispatch einsum and the three expert GEMMs (wo's output feeds the combine mask's
    gradient), not the combine einsum. XLA: 347.4 MFLOP more than without remat, 336.6 counted."""
    einsum, experts, router = 2 * B * S * E * C * M, 3 * 2 * E * B * C * M * H, 2 * B * S * M * E
    from jax.ad_checkpoint import checkpoint_name

    policy = jax.checkpoint_policies.save_only_these_names("decoder_layer_input")

    def loss(remat):
        def block(x, *w):
            x = checkpoint_name(x, "decoder_layer_input")
            return x + _layer(x, *w)
        f = jax.checkpoint(block, policy=policy) if remat else block
        return jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2, 3, 4))

    extra = _flops(loss(True)) - _flops(loss(False))
    assert extra == pytest.approx(einsum + experts + router, rel=0.05)
    assert extra < 1.5 * einsum + experts + router  # the combine einsum is not re-run
