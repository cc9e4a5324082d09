"""--moe-flex-backend: the flex dispatcher's kernels, costed (planner.costmodel.moe HybridEP's counted host launches)
and written into the Megatron launch files as costed."""

import json

from support import one_line_error, plan_json, run_cli

PINNED = ("--model", "qwen3-235b-a22b", "--cluster", "gb200x256", "--tp", "1", "--pp", "8", "--ep", "8", "--mbs", "1",
          "--gbs", "8192", "--zero", "1", "--recompute", "none", "--moe-dispatcher", "flex", "--launcher", "megatron")


def test_hybridep_is_costed_and_written(tmp_path):
    deepep, _ = plan_json(*PINNED)
    hybrid, _ = plan_json(*PINNED, "--moe-flex-backend", "hybridep")
    assert deepep["training"]["moe_flex_backend"] is None and hybrid["training"]["moe_flex_backend"] == "hybridep"
    # the same layout: HybridEP launches ~10 / ~10 kernels after its sync where DeepEP's estimate is 40 / 60
    assert hybrid["plans"][0]["plan"] == deepep["plans"][0]["plan"]
    assert hybrid["plans"][0]["step_time_s"] < 0.9 * deepep["plans"][0]["step_time_s"]
    for backend, extra in (("deepep", ()), ("hybridep", ("--moe-flex-backend", "hybridep"))):
        out = tmp_path / backend
        assert run_cli(*PINNED, *extra, "--out", str(out)).exit_code == 0
        args = json.loads((out / "megatron_args.json").read_text())["args"]
        assert args[args.index("--moe-flex-dispatcher-backend") + 1] == backend


def test_a_backend_without_the_flex_dispatcher_is_refused():
    err = one_line_error(run_cli("--model", "qwen3-30b-a3b", "--cluster", "h100x8", "--moe-flex-backend", "hybridep"))
    assert "--moe-dispatcher flex" in err, err
