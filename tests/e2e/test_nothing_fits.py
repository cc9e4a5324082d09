"""Exit 3 (a valid request with no plan that fits) says the smallest peak the search reached, what it searched, and
only the remedies it has not tried (planner.app.plan.nothing_fits_message)."""

import json

from support import one_line_error, run_cli, smallest_peak_gib

DSV3_FP8 = ("--model", "deepseek-v3", "--cluster", "h100x64", "--dtype", "fp8")


def test_fp8_deepseek_v3_names_the_untried_remedy_and_it_fits():
    # DeepSeek-V3 in FP8 on 64 H100: Transformer Engine's cached FP8 weights (2 B per linear weight on Hopper) beside
    # the bf16 copy do not fit even with the optimizer on the host, which the search tried by itself
    err = one_line_error(run_cli(*DSV3_FP8), code=3)
    assert "(searched: full recompute, ZeRO 1, optimizer offload to the host)" in err, err
    assert "--offload" not in err and "--recompute full" not in err, err  # both already searched
    # with the optimizer offloaded, which these plans need, megatron-core takes FP8 primary weights under delayed
    # scaling only (Stack.fp8_param_gather_offload_recipes): the remedy names both
    assert "--fp8-param-gather --fp8-recipe delayed" in err, err
    # the reported peak is the offloaded search's, below the smallest peak without the offload
    no_offload = one_line_error(run_cli(*DSV3_FP8, "--no-offload"), code=3)
    assert smallest_peak_gib(err) < smallest_peak_gib(no_offload) - 50, (err, no_offload)
    assert "--offload" in no_offload and "optimizer offload" not in no_offload, no_offload
    # the named remedy: FP8 primary weights drop the bf16 copy, and a plan fits
    r = run_cli(*DSV3_FP8, "--fp8-param-gather", "--fp8-recipe", "delayed", "--json")
    assert r.exit_code == 0, r.stderr[-500:]
    assert all(p["plan"]["offload_optimizer"] for p in json.loads(r.stdout)["plans"])
    # under the default recipe (tensorwise) the offload is refused beside them, and nothing fits
    one_line_error(run_cli(*DSV3_FP8, "--fp8-param-gather"), code=3)


def test_a_stack_without_offload_is_not_said_to_have_searched_it():
    # torchtitan's launch files offload nothing: the repeat with the optimizer offloaded scores no plan
    err = one_line_error(run_cli("--model", "llama-405b", "--cluster", "a100x8", "--launcher", "torchtitan"), code=3)
    assert "(searched: full recompute, ZeRO 3)" in err and "--offload" not in err and "--zero 3" not in err, err


def test_dualpipev_without_a_v_split_at_any_searched_depth_says_so():
    # DeepSeek-V3's 61 layers (63 with the embedding and the loss) are odd: no 2*pp divides them at any depth, which the
    # message says instead of what the probe at pp=2 broke ("2*pp=4"), since the depth was not pinned
    err = one_line_error(run_cli("--model", "deepseek-v3", "--cluster", "h100x64", "--schedule", "dualpipev"))
    assert "no pipeline depth of 64 devices (2, 4, 8, 16, 32, 64) does" in err and "2*pp=" not in err, err
    # a pinned depth keeps the probe's own reason
    err = one_line_error(run_cli("--model", "deepseek-v3", "--cluster", "h100x64", "--schedule", "dualpipev",
                                 "--pp", "8"))
    assert "2*pp=16 equal stages" in err, err


def test_every_layout_refused_names_the_rule_and_no_pins():
    # Kimi K2 in FP8 on 128 v5p chips, costed for MaxText: its FP8 quantization takes no gradient accumulation, and
    # no layout runs the 1,024-sequence batch in one micro-batch per step. Nothing is pinned: the advice is not to
    # pin fewer knobs, and the rule is named
    err = one_line_error(run_cli("--model", "kimi-k2", "--cluster", "tpu-v5px128", "--dtype", "fp8"))
    assert "by maxtext, the launcher the plans are costed for" in err, err
    assert "the closest candidate breaks: MaxText fp8 quantization cannot be combined with gradient accumulation" in err
    assert "pin fewer knobs" not in err and "pinned" not in err, err


def test_layouts_the_memory_bound_pruned_are_a_memory_answer():
    # the pinned TP4 PP8 EP8 leaves expert TP 4 (refused: ep*etp=32 does not divide tp*cp*dp=8) and expert TP 1, whose
    # model states alone exceed the HBM without the offload: exit 3 with its peak, not "no layout can be run"
    err = one_line_error(run_cli(*DSV3_FP8, "--tp", "4", "--pp", "8", "--ep", "8", "--mbs", "1", "--recompute", "full",
                                 "--no-offload"), code=3)
    assert smallest_peak_gib(err) > 200 and "(searched: full recompute, ZeRO 1)" in err, err


def test_a_pinned_request_whose_plans_do_not_fit_reports_the_peak_of_plans_its_launcher_runs():
    # Llama 3.1 70B on 32 v5e chips with MaxText's remat offload pinned off: MaxText runs some of the layouts and none
    # fits. Exit 3 reports their smallest peak; before, the request was searched again as if no launcher ruled it
    # (the path that costs DeepSeek-V3's own DualPipe plan as pinned), and reported 16.8 GiB from TP 32 over 8 KV
    # heads, which maxtext refuses (launchers.maxtext rule kv-heads)
    args = ("--model", "llama-3.1-70b", "--cluster", "tpu-v5ex32", "--remat-offload", "none")
    pinned = one_line_error(run_cli(*args), code=3)
    gated = one_line_error(run_cli(*args, "--launcher", "maxtext"), code=3)
    assert smallest_peak_gib(pinned) == smallest_peak_gib(gated) > 17.0, (pinned, gated)
