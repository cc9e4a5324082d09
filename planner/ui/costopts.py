"""The cost options shared by `plan`, `plan compare` and `plan report` (one decorator, one check,
one estimate), so the three commands accept and refuse exactly the same things."""

from __future__ import annotations

import re

import click

from planner.errors import InputError
from planner.names import safe_line
from planner.ui.jsondoc import _non_finite_path

COST_KEYS = ("tokens", "price_per_device_hour", "currency", "device_mtbf_hours", "restart_min", "storage_write_bw")
# a short label: letters (USD, EUR, credits) or one currency sign; anything else is refused, never printed
_CURRENCY = re.compile(r"^(?:[A-Za-z]{1,8}|[$\u00a2-\u00a5\u20a0-\u20c0])$")


def finite(ctx, param, value):
    """click callback: refuse nan/inf (click's FloatRange lets them through)."""
    import math

    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, got {value}")
    return value


def cost_options(f):
    """--tokens, --price-per-device-hour, --currency, --device-mtbf-hours, --restart-min."""
    opts = [
        click.option("--tokens",
                     help="total training tokens (e.g. 15T): adds wall-clock days, goodput and device-hours"),
        click.option("--price-per-device-hour", type=click.FloatRange(0, None), callback=finite,
                     help="price of one device-hour (needs --tokens): adds the cost"),
        click.option("--currency", help="label printed with the cost, e.g. USD or EUR (needs --price-per-device-hour)"),
        click.option("--device-mtbf-hours", type=click.FloatRange(0, None, min_open=True), callback=finite,
                     help="mean time between failures per device (default: Llama 3's 16k-H100 run)"),
        click.option("--restart-min", type=click.FloatRange(0, None), default=10.0, show_default=True, callback=finite,
                     help="minutes to restart after a failure (Daly 2006 uses 10 min in his examples)"),
        click.option("--storage-write-bw", metavar="BW",
                     help="aggregate write bandwidth of the checkpoint store, with a unit: 20GB (gigabytes/s) or "
                     "160Gb (gigabits/s); sets the checkpoint cost (default: Llama 3's Tectonic, 2 TB/s)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def check_cost_options(kw: dict, clusters: tuple = ()) -> None:
    """A price needs tokens; a currency needs a price (the flag's or a cluster's own, `h100x16@2.5`);
    the currency is a short label. `clusters`: the --cluster arguments (strings or ClusterSpecs)."""
    if kw.get("price_per_device_hour") is not None and not kw.get("tokens"):
        raise InputError("--price-per-device-hour needs --tokens: add the training budget, e.g. --tokens 15T")
    cur = kw.get("currency")
    if cur is not None:
        if kw.get("price_per_device_hour") is None and not any(_cluster_price(c) is not None for c in clusters):
            raise InputError("--currency labels the cost: add --price-per-device-hour or a price in the cluster "
                             "(h100x16@2.5), and --tokens")
        if not _CURRENCY.match(cur):
            raise InputError("--currency must be a short label such as USD, EUR or $ (letters only, at most 8)")
    if kw.get("storage_write_bw") is not None:
        if not kw.get("tokens"):
            raise InputError("--storage-write-bw sets the checkpoint cost of --tokens: add the training budget, "
                             "e.g. --tokens 15T")
        storage_write_Bps(kw["storage_write_bw"])
    if kw.get("tokens"):
        from planner.analysis.goodput import parse_tokens
        parse_tokens(kw["tokens"])  # raises InputError with the accepted forms


def storage_write_Bps(text: str) -> float:
    """'20GB' -> 2e10 B/s, '160Gb' -> 2e10 (aggregate write bandwidth of the checkpoint store)."""
    from planner.catalog.overrides import parse_bandwidth_GBps

    try:
        return parse_bandwidth_GBps(text, "--storage-write-bw") * 1e9
    except InputError:
        raise InputError(f"--storage-write-bw {safe_line(text, 40)}: give the checkpoint store's aggregate write "
                         "bandwidth with a unit, e.g. 20GB (gigabytes/s) or 160Gb (gigabits/s)") from None


def _cluster_price(cluster) -> float | None:
    """A cluster's own price per device-hour: from a `plan --json` cluster object, a ClusterSpec, or a
    --cluster argument (parsed; a bad one raises the InputError its search would)."""
    if cluster is None:
        return None
    if isinstance(cluster, dict):
        return cluster.get("price_per_device_hour")
    if isinstance(cluster, str):
        from planner.catalog.hardware import parse_cluster
        cluster = parse_cluster(cluster)
    return getattr(cluster, "price_per_device_hour", None)


def priced(kw: dict, cluster) -> dict:
    """The cost options with the price this cluster is charged at: its own (`h100x16@2.5`, a cluster file's
    `price_per_device_hour`) before --price-per-device-hour, which prices the clusters without one."""
    own = _cluster_price(cluster)
    if own is not None:
        return kw | {"price_per_device_hour": own, "price_source": "cluster"}
    if kw.get("price_per_device_hour") is not None:
        return kw | {"price_source": "--price-per-device-hour"}
    return kw


def _estimate(plan_entry: dict, params_total: float, kw: dict) -> dict | None:
    from planner.analysis.goodput import estimate_for_plan

    extra = {"price_per_device_hour": kw.get("price_per_device_hour")}
    if kw.get("device_mtbf_hours"):
        extra["device_mtbf_h"] = kw["device_mtbf_hours"]
    if kw.get("storage_write_bw"):
        extra["storage_write_Bps"] = storage_write_Bps(kw["storage_write_bw"])
    restart_min = 10.0 if kw.get("restart_min") is None else kw["restart_min"]
    try:
        est = estimate_for_plan(plan_entry, kw["tokens"], params_total=params_total,
                                restart_s=restart_min * 60.0, **extra).to_dict()
    except (OverflowError, ZeroDivisionError):
        return None
    return None if _non_finite_path(est) else est


def _band_estimates(plan_entry: dict, params_total: float, kw: dict) -> dict:
    """`effective_days_band` and `cost_band` ([low, high]): the estimate at the two edges of the plan's step
    time band (planner.analysis.bands), throughput scaling as 1 / step time."""
    band = plan_entry.get("step_time_band")
    if not band:
        return {}
    edges = []
    for edge_s in (band["low_s"], band["high_s"]):
        scaled = plan_entry | {"tokens_per_s_per_device": plan_entry["tokens_per_s_per_device"]
                               * plan_entry["step_time_s"] / edge_s}
        est = _estimate(scaled, params_total, kw)
        if est is None:
            return {}
        edges.append(est)
    out = {"effective_days_band": [edges[0]["effective_days"], edges[1]["effective_days"]]}
    if edges[0].get("cost") is not None:
        out["cost_band"] = [edges[0]["cost"], edges[1]["cost"]]
    return out


def estimate_doc(plan_entry: dict, params_total: float, kw: dict, cluster=None) -> dict:
    """The training estimate of one plan (`--json` plan entry) as a JSON-ready dict with the currency, the
    price the cluster is charged at (`priced`) and the days and cost at the edges of the step time band."""
    kw = priced(kw, cluster)
    est = _estimate(plan_entry, params_total, kw)
    if est is None:
        restart_min = 10.0 if kw.get("restart_min") is None else kw["restart_min"]
        raise InputError(f"--tokens {safe_line(kw['tokens'])} with --restart-min {restart_min:g}, --device-mtbf-hours "
                         f"{kw.get('device_mtbf_hours') or 'default'} and --price-per-device-hour "
                         f"{kw.get('price_per_device_hour')} gives no finite training time or cost (failures faster "
                         "than restarts?): use realistic figures")
    return est | _band_estimates(plan_entry, params_total, kw) | {
        "price_per_device_hour": kw.get("price_per_device_hour"), "price_source": kw.get("price_source"),
        "currency": kw.get("currency")}


def cost_text(e: dict) -> str:
    """'1,255,105 USD' (or without a label); '-' without a price."""
    if e.get("cost") is None:
        return "-"
    return f"{e['cost']:,.0f}" + (f" {e['currency']}" if e.get("currency") else "")


def cost_band_text(e: dict) -> str:
    """'1.12M-1.41M' : the cost at the edges of the step time band ('' without a price or band)."""
    band = e.get("cost_band")
    if not band:
        return ""
    return f"{_short(band[0])}-{_short(band[1])}"


def _short(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def estimate_text(e: dict, width: int | None = None) -> str:
    line = (f"Training: {e['days']:.1f} days without failures, {e['effective_days']:.1f} days expected "
            f"(goodput {100 * e['goodput']:.1f}%: ~{e['failures_expected']:.0f} failures, checkpoint every "
            f"{e['checkpoint_interval_s'] / 60:.0f} min taking {e['checkpoint_s']:.0f} s); "
            f"{e['device_hours']:,.0f} device-hours")
    if e.get("cost") is not None:
        line += f", cost {cost_text(e)}"
        if e.get("cost_band"):
            line += f" ({cost_band_text(e)} over the step time's error band)"
    if not width:
        return line
    from planner.ui.table import wrapped  # rich: only where text is wrapped for the terminal (--json never)

    return wrapped(line, width, "  ")
