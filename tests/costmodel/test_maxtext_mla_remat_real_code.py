"""What MaxText's remat_policy "minimal" re-runs in an MLA layer, as XLA compiles it: the attention core and the
down-projections, not the up-projections (compute.custom_remat_recompute_s, Stack.selective_keeps). The layer is
written the way MaxText's layers/attention_mla.py at 3eb77db writes it: the latents (wq_a's and wkv_a's outputs,
normed) carry no checkpoint name, the up-projections' outputs are named query_proj / key_proj / value_proj and the
output projection's out_proj; the policy is jax.checkpoint_policies.save_only_these_names over the "minimal" names
(MT:layers/decoders.py minimal_policy). Measured on XLA's compiled FLOPs (jax on CPU, cost_analysis): the gradient's
FLOPs with the policy minus without any rematerialisation is the forward work the backward re-runs."""

from __future__ import annotations

import pytest

from planner.stacks.maxtext import REMAT_MINIMAL_KEEPS

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.slow

# tokens, hidden, heads, q latent, kv latent, rope dim, nope dim, value dim: the down-projections (h -> latents) are
# made much larger than the up-projections (latents -> heads) so the two hypotheses are far apart
S, HID, NH, QL, KVL, ROPE, NOPE, VD = 64, 1024, 4, 64, 32, 16, 32, 32
DQK = NOPE + ROPE


def _layer(x, wq_a, wq_b, wkv_a, wkv_b, wo, latent_names=False):
    from jax.ad_checkpoint import checkpoint_name

    def rms(t):
        return t * jax.lax.rsqrt(jnp.mean(t * t, -1, keepdims=True) + 1e-6)

    def latent(t, name):  # MaxText at 3eb77db names no latent; the control names them before their norms
        return checkpoint_name(t, name) if latent_names else t

    kv = latent(x @ wkv_a, "kv_latent")
    q = (rms(latent(x @ wq_a, "q_latent")) @ wq_b).reshape(S, NH, DQK)
    kv_up = (rms(kv[:, :KVL]) @ wkv_b).reshape(S, NH, NOPE + VD)
    k = jnp.concatenate([kv_up[..., :NOPE], jnp.broadcast_to(kv[:, None, KVL:], (S, NH, ROPE))], -1)
    q, k = checkpoint_name(q, "query_proj"), checkpoint_name(k, "key_proj")
    v = checkpoint_name(kv_up[..., NOPE:], "value_proj")
    p = jax.nn.softmax(jnp.einsum("shd,thd->hst", q, k) * DQK ** -0.5, -1)
    return checkpoint_name(jnp.einsum("hst,thd->shd", p, v).reshape(S, NH * VD) @ wo, "out_proj")


def _rerun_flops(layer, policy) -> float:
    """Forward FLOPs the backward re-runs: the gradient's FLOPs of two such layers scanned with the layer under
    jax.checkpoint(policy) minus without it (MaxText scans its layers; a checkpoint around a whole jitted function
    is merged with the forward by XLA and shows nothing). XLA's cost analysis counts a loop body once, so this is
    one layer's; the test compares ratios, which hold either way."""
    shapes = ((HID, QL), (QL, NH * DQK), (HID, KVL + ROPE), (KVL, NH * (NOPE + VD)), (NH * VD, HID))
    args = [jnp.ones((S, HID), jnp.float32)] + [jnp.ones((2, *s), jnp.float32) for s in shapes]

    def flops(lay) -> float:
        def model(x, *ws):
            return jnp.sum(jax.lax.scan(lambda h, w: (h + lay(h, *w), None), x, ws)[0])

        cost = jax.jit(jax.grad(model, argnums=tuple(range(len(args))))).lower(*args).compile().cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["flops"]

    return flops(jax.checkpoint(layer, policy=policy)) - flops(layer)


def test_minimal_policy_reruns_the_core_and_the_down_projections():
    from functools import partial

    pol = jax.checkpoint_policies
    core = 2 * S * S * NH * (DQK + VD)  # QK^T and PV, forward
    down = 2 * S * HID * (QL + KVL + ROPE)  # wq_a, wkv_a (compute.mla_down_proj_s)
    up = 2 * S * (QL * NH * DQK + KVL * NH * (NOPE + VD))  # wq_b, wkv_b (compute.mla_up_proj_s)
    assert down > 4 * up  # the hypotheses are far apart
    # nothing saved: everything the backward needs re-runs, all but the output projection (its output is not needed)
    full = _rerun_flops(_layer, pol.nothing_saveable)
    minimal = _rerun_flops(_layer, pol.save_only_these_names(*REMAT_MINIMAL_KEEPS))
    # "minimal": the core and the down-projections (0.87 of it here), not the core and the up-projections (0.26)
    assert minimal / full == pytest.approx((core + down) / (core + down + up), abs=0.02), (minimal, full)
    # the control: with the latents kept too (before their norms, whose backward reads their input), the core alone
    # re-runs (0.13)
    named = partial(_layer, latent_names=True)
    kept = _rerun_flops(named, pol.save_only_these_names(*REMAT_MINIMAL_KEEPS, "q_latent", "kv_latent"))
    assert kept / full == pytest.approx(core / (core + down + up), abs=0.02), (kept, full)
