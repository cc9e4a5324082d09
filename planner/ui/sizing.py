"""`--min-devices`: the sentence stating the count found and the bound it was sized against
(planner.app.plan.sizing_bound)."""

from __future__ import annotations


def sizing_line(summary: dict) -> str:
    """'fewest devices: 512 x h100-sxm-80gb; its best plan steps in 7.73 s, 8.65 s at the upper edge of the
    ±12% error band (hopper/dense/megatron), within --target-step-s 10; layouts with ...'."""
    line = f"fewest devices: {summary['devices']} x {summary['hardware']}"
    step_s = summary["step_time_s"]
    if summary["bound"] == "step_time_band.high_s":
        rel = summary["margin_rel"]
        line += (f"; its best plan steps in {step_s:.3g} s, {step_s * (1 + rel):.3g} s at the upper edge of the "
                 f"±{100 * rel:.0f}% error band ({summary['band_regime']}), within --target-step-s "
                 f"{summary['target_step_s']:g}")
    else:
        line += "; the first count on which a plan fits"
    if summary["layout_rule"].startswith("--pp"):
        return line + f"; layouts with {summary['layout_rule']}"
    return line + f"; layouts with {summary['num_layers']} layers split evenly over the pipeline stages, whole nodes"
