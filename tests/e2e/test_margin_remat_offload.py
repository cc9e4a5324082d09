"""When the memory margin ranks a much slower plan first on MaxText, or nothing fits, the planner says what an expert
on a small-HBM TPU would do: offload each layer's input to host memory (remat_policy custom), with the plan, its step
and its flags (planner.app.plan.remat_offload_search); the copies are priced at the host link
(compute.remat_offload_s)."""

import json
import re

from support import run_cli, smallest_peak_gib

LLAMA_405B_V6E = ("--model", "llama-3.1-405b", "--cluster", "tpu-v6ex256")
HINT = "--recompute selective --remat-offload decoder_layer_input"


def _first(*args: str) -> dict:
    r = run_cli(*args, "--json")
    assert r.exit_code == 0, r.stderr[-500:]
    return json.loads(r.stdout)["plans"][0]


def test_the_margin_note_names_the_offload_plan_and_its_flags_give_it():
    # Llama 3.1 405B on 256 v6e chips (31.2 GiB usable): every fast layout leaves less than the margin free, so #1 is
    # a TP128 plan; with the layer inputs on the host TP4 keeps the margin
    top = _first(*LLAMA_405B_V6E)
    note = next(w for w in top["warnings"] if w.startswith("the memory margin ranks"))
    assert HINT in note, note
    m = re.search(r"keeps the margin at ([0-9.]+) s where #1 takes ([0-9.]+) s", note)
    offload_s, first_s = float(m.group(1)), float(m.group(2))
    assert first_s == round(top["step_time_s"], 3) and offload_s < first_s / 2, note
    # the flags it names give that plan, inside the margin, its host copies charged
    alt = _first(*LLAMA_405B_V6E, *HINT.split())
    assert round(alt["step_time_s"], 3) == offload_s and alt["within_memory_margin"], alt["memory"]
    assert alt["plan"]["tp"] < top["plan"]["tp"], (alt["plan"], top["plan"])


def test_no_offload_hint_where_the_stack_has_no_such_policy_or_one_is_asked_for():
    # Megatron (DeepSeek-V3 on 1024 H100): the margin note, no remat policy to offer
    top = _first("--model", "deepseek-v3", "--cluster", "h100x1024")
    note = next(w for w in top["warnings"] if w.startswith("the memory margin ranks"))
    assert "--remat-offload" not in note, note
    # MaxText with full recompute pinned (the custom policy applies to selective recompute) or a policy given
    for pins in (("--recompute", "full"), ("--recompute", "selective", "--remat-offload", "query_proj")):
        top = _first(*LLAMA_405B_V6E, *pins)
        assert not any("--remat-offload" in w for w in top["warnings"]), (pins, top["warnings"])


def test_when_nothing_fits_the_offload_remedy_is_named_only_where_a_plan_fits_with_it():
    # Llama 3.1 8B on 4 v5e chips (15.8 GiB usable): 15.9 GiB at best with full recompute, ZeRO 3 and the optimizer on
    # the host; with the layer inputs on the host a plan fits, and the message names it with the flags that give it
    r = run_cli("--model", "llama-3.1-8b", "--cluster", "tpu-v5ex4")
    assert r.exit_code == 3, r.stderr[-300:]
    m = re.search(r"--remat-offload decoder_layer_input \(each layer's input in host memory: .* fits, ([0-9.]+) GiB, "
                  r"([0-9.]+) s\)", r.stderr)
    assert m, r.stderr
    alt = _first("--model", "llama-3.1-8b", "--cluster", "tpu-v5ex4", *HINT.split())
    assert round(alt["step_time_s"], 3) == float(m.group(2)) and alt["fits"], alt["memory"]
    assert "each layer's input in host memory)" not in r.stderr.split("Try")[0], r.stderr  # named, not "searched"
    # Llama 3.1 70B on 32 v5e chips: the states alone do not fit, the offload does not help: not named, said searched,
    # and the smallest peak is the lowest of every search run (the offload's 16.7 GiB, not the 16.8 without it)
    r = run_cli("--model", "llama-3.1-70b", "--cluster", "tpu-v5ex32")
    assert r.exit_code == 3 and "--remat-offload" not in r.stderr, r.stderr[-300:]
    assert "optimizer offload to the host, each layer's input in host memory)" in r.stderr, r.stderr
    with_flags = run_cli("--model", "llama-3.1-70b", "--cluster", "tpu-v5ex32", *HINT.split())
    assert with_flags.exit_code == 3, with_flags.stderr[-300:]
    assert smallest_peak_gib(r.stderr) == smallest_peak_gib(with_flags.stderr) < 16.8, (r.stderr, with_flags.stderr)
