"""The candidate space: every divisibility rule in one place (in the manner of torchtitan's ParallelDims).

A plan is valid when (Megatron-core / torchtitan rules):
  tp * pp * cp * dp == devices;              ep * etp divides tp * cp * dp, experts % ep == 0
  heads % tp == 0; kv_heads % tp == 0 or tp % kv_heads == 0 (KV heads replicated)
  seq_len % (2 * cp) == 0 (load-balanced causal CP chunks); a2a CP needs heads % (tp * cp) == 0
  pp * vpp chunks each get a layer; the search proposes only even splits (counting the embedding and loss
  as a layer each where that makes it even: Megatron --account-for-*-in-pipeline-split), a user-fixed
  uneven split is allowed (Megatron --pipeline-model-parallel-layout); explicit first/last stage sizes too
  global_batch % (dp * micro_batch) == 0
  sequence parallelism only with tp > 1; interleaving only with pp > 1
  zero_shard_size only with ZeRO (zero_stage >= 1); recompute_layers only with full recompute
`pinned_errors` applies the same rules to a user's pinned knobs before any search.
"""

from __future__ import annotations

from pydantic import ValidationError

from planner.specs import ModelSpec, ParallelPlan, TrainingSpec


def divisors(n: int) -> list[int]:
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def plan_errors(model: ModelSpec, train: TrainingSpec, devices: int, p: ParallelPlan) -> list[str]:
    """Every rule the plan breaks, as one-line messages (empty = valid)."""
    errs: list[str] = []
    if p.tp * p.pp * p.cp * p.dp != devices:
        errs.append(f"tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{p.dp} = {p.tp * p.pp * p.cp * p.dp}, not the {devices} devices")
    if model.num_heads % p.tp:
        errs.append(f"{model.num_heads} attention heads do not split over tp={p.tp}")
    if model.num_kv_heads % p.tp and p.tp % model.num_kv_heads:
        errs.append(f"{model.num_kv_heads} KV heads neither divide nor are divisible by tp={p.tp}")
    if train.seq_len % (2 * p.cp) and p.cp > 1:
        errs.append(f"seq_len {train.seq_len} is not divisible by 2*cp={2 * p.cp}")
    if p.cp > 1 and p.cp_comm == "a2a" and model.num_heads % (p.tp * p.cp):
        errs.append(f"all-to-all CP needs heads ({model.num_heads}) divisible by tp*cp={p.tp * p.cp}")
    if p.pp > model.num_layers:
        errs.append(f"pp={p.pp} exceeds the {model.num_layers} layers")
    if p.vpp > 1 and p.pp == 1:
        errs.append("virtual pipeline stages (vpp > 1) need pp > 1")
    if p.schedule == "interleaved" and p.vpp == 1 and p.pp > 1:
        errs.append("the interleaved schedule needs vpp > 1")
    if (p.schedule == "interleaved" and p.pp > 1 and p.dp * p.micro_batch and train.global_batch % (p.dp * p.micro_batch) == 0
            and (train.global_batch // (p.dp * p.micro_batch)) % p.pp):
        errs.append(f"the interleaved schedule needs the micro-batch count "
                    f"({train.global_batch // (p.dp * p.micro_batch)}) divisible by pp={p.pp} (Megatron rule)")
    if p.vpp > 1 and p.schedule != "interleaved":
        errs.append("vpp > 1 needs the interleaved schedule")
    if p.first_stage_layers is None and p.last_stage_layers is None:
        if p.pp * p.vpp > model.num_layers + 2:
            errs.append(f"{model.num_layers} layers cannot fill pp*vpp={p.pp * p.vpp} pipeline chunks")
    else:
        fixed = (p.first_stage_layers or 0) + (p.last_stage_layers or 0)
        free = p.pp - (p.first_stage_layers is not None) - (p.last_stage_layers is not None)
        rest = model.num_layers - fixed
        if rest < 0 or (free and rest % free) or (not free and rest):
            errs.append(f"uneven stages first={p.first_stage_layers} last={p.last_stage_layers} do not split "
                        f"{model.num_layers} layers over pp={p.pp}")
        elif p.vpp > 1 and any(c % p.vpp for c in (p.first_stage_layers, p.last_stage_layers, rest // free if free else 0)
                               if c is not None):
            errs.append(f"with vpp={p.vpp} every stage's layer count must divide into {p.vpp} virtual stages "
                        "(Megatron rule for --decoder-first/last-pipeline-num-layers)")
    if p.account_embedding_loss:
        units = model.num_layers + 2
        if p.pp < 2 or units % p.pp or (units // p.pp) % p.vpp:
            errs.append(f"counting the embedding and loss as layers needs pp > 1 and {units} divisible by pp={p.pp} "
                        f"into stages divisible by vpp={p.vpp} (Megatron rule)")
        if p.first_stage_layers is not None or p.last_stage_layers is not None:
            errs.append("account_embedding_loss and first/last stage sizes are exclusive")
    if train.global_batch % (p.dp * p.micro_batch):
        errs.append(f"global batch {train.global_batch} is not divisible by dp*micro_batch={p.dp * p.micro_batch}")
    if model.moe is None:
        if p.ep > 1 or p.etp > 1:
            errs.append("ep/etp > 1 need a mixture-of-experts model")
    else:
        if model.moe.num_experts % p.ep:
            errs.append(f"{model.moe.num_experts} experts do not split over ep={p.ep}")
        if (p.tp * p.cp * p.dp) % (p.ep * p.etp):
            errs.append(f"ep*etp={p.ep * p.etp} does not divide tp*cp*dp={p.tp * p.cp * p.dp}")
        if p.etp > 1 and model.moe.expert_ffn_hidden_size % p.etp:
            errs.append(f"expert FFN width {model.moe.expert_ffn_hidden_size} does not split over etp={p.etp}")
    if p.zero_shard_size is not None and (p.dp * p.cp) % p.zero_shard_size:
        errs.append(f"zero_shard_size={p.zero_shard_size} does not divide dp*cp={p.dp * p.cp}")
    if p.zero_shard_size is not None and p.zero_stage == 0:
        errs.append(f"zero_shard_size={p.zero_shard_size} needs ZeRO (zero_stage >= 1): with zero_stage 0 nothing is sharded")
    if p.recompute_layers is not None and p.recompute != "full":
        errs.append("recompute_layers applies only to full recompute")
    return errs


def _factorisations(devices: int, fixed: dict) -> list[tuple[int, int, int, int]]:
    """Every (tp, pp, cp, dp) with tp*pp*cp*dp == devices that agrees with the pinned ones."""
    out = []
    for tp in ([fixed["tp"]] if "tp" in fixed else divisors(devices)):
        if devices % tp:
            continue
        for pp in ([fixed["pp"]] if "pp" in fixed else divisors(devices // tp)):
            if (devices // tp) % pp:
                continue
            for cp in ([fixed["cp"]] if "cp" in fixed else divisors(devices // (tp * pp))):
                if (devices // (tp * pp)) % cp:
                    continue
                dp = devices // (tp * pp * cp)
                if fixed.get("dp", dp) == dp:
                    out.append((tp, pp, cp, dp))
    return out


def pinned_errors(model: ModelSpec, train: TrainingSpec, devices: int, fixed: dict) -> list[str]:
    """Why the pinned knobs can never form a valid plan (empty = some plan satisfies every rule).

    Uses `plan_errors` (the one owner of the rules) on probes: every tp*pp*cp*dp factorisation that agrees
    with the pinned knobs, each other knob pinned or at its most permissive value (ep=etp=vpp=micro_batch=1:
    every rule only gets harder as they grow). Returns the rules broken by the probe breaking the fewest,
    among them the pinned values that would be ignored (zero_shard_size with zero_stage 0, recompute_layers
    without full recompute)."""
    fx = {k: v for k, v in fixed.items() if v is not None and not isinstance(v, tuple)}
    errs: list[str] = []
    base = {"recompute": "full" if fx.get("recompute_layers") is not None else "none",
            "schedule": "interleaved" if fx.get("vpp", 1) > 1 else "1f1b"} | fx
    best: list[str] | None = None
    for tp, pp, cp, dp in _factorisations(devices, fx):
        knobs = base | {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
        if knobs["schedule"] == "interleaved" and pp == 1 and "schedule" not in fx:
            knobs["schedule"] = "1f1b"
        try:
            probe = ParallelPlan(**knobs)
        except ValidationError as e:  # a pinned value out of the knob's range: name the knob, no pydantic URL
            first = e.errors()[0]
            return errs + [f"{'.'.join(map(str, first['loc']))}: {first['msg']}"]
        found = plan_errors(model, train, devices, probe)
        if not found:
            return errs
        if best is None or len(found) < len(best):
            best = found
    if best is None:
        pins = ", ".join(f"{k}={fx[k]}" for k in ("tp", "pp", "cp", "dp") if k in fx)
        best = [f"the pinned {pins} cannot multiply into the {devices} devices (tp*pp*cp*dp = devices)"]
    return errs + best
