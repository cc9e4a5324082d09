"""The cost options shared by `plan`, `plan compare` and `plan report` (one decorator, one check,
one estimate), so the three commands accept and refuse exactly the same things."""

from __future__ import annotations

import re

import click

from planner.errors import InputError
from planner.names import safe_line
from planner.ui.jsondoc import _non_finite_path
from planner.ui.table import wrapped

COST_KEYS = ("tokens", "price_per_device_hour", "currency", "device_mtbf_hours", "restart_min")
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
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def check_cost_options(kw: dict) -> None:
    """A price needs tokens; a currency needs a price; the currency is a short label."""
    if kw.get("price_per_device_hour") is not None and not kw.get("tokens"):
        raise InputError("--price-per-device-hour needs --tokens: add the training budget, e.g. --tokens 15T")
    cur = kw.get("currency")
    if cur is not None:
        if kw.get("price_per_device_hour") is None:
            raise InputError("--currency labels the cost: add --price-per-device-hour (and --tokens)")
        if not _CURRENCY.match(cur):
            raise InputError("--currency must be a short label such as USD, EUR or $ (letters only, at most 8)")
    if kw.get("tokens"):
        from planner.analysis.goodput import parse_tokens
        parse_tokens(kw["tokens"])  # raises InputError with the accepted forms


def estimate_doc(plan_entry: dict, params_total: float, kw: dict) -> dict:
    """The training estimate of one plan (`--json` plan entry) as a JSON-ready dict with the currency."""
    from planner.analysis.goodput import estimate_for_plan

    extra = {"price_per_device_hour": kw.get("price_per_device_hour")}
    if kw.get("device_mtbf_hours"):
        extra["device_mtbf_h"] = kw["device_mtbf_hours"]
    restart_min = 10.0 if kw.get("restart_min") is None else kw["restart_min"]
    try:
        est = estimate_for_plan(plan_entry, kw["tokens"], params_total=params_total,
                                restart_s=restart_min * 60.0, **extra).to_dict()
    except (OverflowError, ZeroDivisionError):
        est = None
    if est is None or _non_finite_path(est):
        raise InputError(f"--tokens {safe_line(kw['tokens'])} with --restart-min {restart_min:g}, --device-mtbf-hours "
                         f"{kw.get('device_mtbf_hours') or 'default'} and --price-per-device-hour "
                         f"{kw.get('price_per_device_hour')} gives no finite training time or cost (failures faster "
                         "than restarts?): use realistic figures")
    return est | {"price_per_device_hour": kw.get("price_per_device_hour"), "currency": kw.get("currency")}


def cost_text(e: dict) -> str:
    """'1,255,105 USD' (or without a label); '-' without a price."""
    if e.get("cost") is None:
        return "-"
    return f"{e['cost']:,.0f}" + (f" {e['currency']}" if e.get("currency") else "")


def estimate_text(e: dict, width: int | None = None) -> str:
    line = (f"Training: {e['days']:.1f} days without failures, {e['effective_days']:.1f} days expected "
            f"(goodput {100 * e['goodput']:.1f}%: ~{e['failures_expected']:.0f} failures, checkpoint every "
            f"{e['checkpoint_interval_s'] / 60:.0f} min taking {e['checkpoint_s']:.0f} s); "
            f"{e['device_hours']:,.0f} device-hours")
    if e.get("cost") is not None:
        line += f", cost {cost_text(e)}"
    return wrapped(line, width, "  ") if width else line
