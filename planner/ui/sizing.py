"""`--min-devices`: the bound a purchase is sized against and the sentence that states it.

A device count is bought once and run for months, so the target step time must hold at the upper edge of
the prediction's error band (planner.analysis.bands: 90% of published runs like it landed inside), not at
the point prediction: sizing at the point leaves about half the outcomes above the target."""

from __future__ import annotations

EVEN_STAGES_RULE = ("pipeline depths that divide the layers evenly (no short first or last stage), whole nodes, "
                    "unless --pp is pinned")


def sizing_bound(model, cluster, train, target_step_s: float | None) -> dict:
    """The `min_devices` fields naming the bound: `bound` ('step_time_band.high_s' with a target, else
    'fits'), `margin_rel` (the band's rel the predicted step is multiplied by), `band_regime`, `layout_rule`."""
    if target_step_s is None:
        return {"bound": "fits", "margin_rel": 0.0, "band_regime": None, "layout_rule": EVEN_STAGES_RULE}
    from planner.analysis.bands import band_for_context
    from planner.costmodel import Context

    band = band_for_context(Context(model, cluster, train))
    return {"bound": "step_time_band.high_s", "margin_rel": band.rel, "band_regime": band.regime,
            "layout_rule": EVEN_STAGES_RULE}


def sizing_line(summary: dict, step_s: float, num_layers: int) -> str:
    """'fewest devices: 512 x h100-sxm-80gb; its best plan steps in 8.71 s, 9.76 s at the upper edge of the
    ±12% error band (hopper/dense/megatron), within --target-step-s 10; ...'."""
    n, hw = summary["devices"], summary["hardware"]
    line = f"fewest devices: {n} x {hw}"
    if summary["bound"] == "step_time_band.high_s":
        rel = summary["margin_rel"]
        line += (f"; its best plan steps in {step_s:.3g} s, {step_s * (1 + rel):.3g} s at the upper edge of the "
                 f"±{100 * rel:.0f}% error band ({summary['band_regime']}), within --target-step-s "
                 f"{summary['target_step_s']:g}")
    else:
        line += "; the first count on which a plan fits"
    if summary["layout_rule"] != EVEN_STAGES_RULE:
        return line + f"; layouts with {summary['layout_rule']}"
    return line + f"; layouts with {num_layers} layers split evenly over the pipeline stages, whole nodes"
