"""planner.ui.report: the HTML page is well-formed, self-contained, escaped and has every chart.

The fixtures below are written by hand in the `--json` plan schema; test_report_browser.py loads
the same page in a real headless browser.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from planner.analysis.goodput import estimate_for_plan
from planner.costmodel.pipeline import pipeline_step_time
from planner.errors import InputError
from planner.ui.report import CHART_IDS, pareto_front, plan_label, render_report

# --- hand-written fixtures ---------------------------------------------------------------------


def make_plan(tp=8, pp=4, dp=2, *, vpp=1, cp=1, ep=1, mb=1, zero=1, recompute="selective", schedule="1f1b",
              step=12.3, tps=2100.0, mfu=0.41, peak=61.2, fits=True, m=64, reason="", warnings=()):
    """One entry of the `--json` "plans" list; memory and time parts are fixed shares of the totals."""
    fwd = [round(step * 0.22 / m * (1.1 if s == 0 else 1.0), 6) for s in range(pp)]  # first stage has the embedding
    stage = [3 * f for f in fwd]  # backward = 2 x forward
    bubble = pipeline_step_time(stage, m, schedule, vpp, fwd) - m * max(stage)  # the scored model's bubble
    return {
        "plan": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "etp": 1, "vpp": vpp, "micro_batch": mb,
                 "zero_stage": zero, "zero_shard_size": None, "recompute": recompute, "recompute_layers": None,
                 "sequence_parallel": tp > 1, "schedule": schedule, "cp_comm": "ring", "first_stage_layers": None,
                 "last_stage_layers": None, "offload_optimizer": False, "tp_comm_overlap": False},
        "step_time_s": step, "tokens_per_s_per_device": tps, "mfu": mfu, "hfu": round(mfu * 1.25, 4),
        "memory": {"peak_gib": peak, "capacity_gib": 79.2, "weights_gib": 0.13 * peak, "grads_gib": 0.26 * peak,
                   "optimizer_gib": 0.10 * peak, "activations_gib": 0.41 * peak, "buffers_gib": 0.035 * peak,
                   "overhead_gib": 0.065 * peak},
        "time_breakdown": {"compute_s": 0.73 * step, "recompute_s": 0.065 * step, "bubble_s": bubble,
                           "tp_comm_s": 0.05 * step, "cp_comm_s": 0.0, "ep_comm_s": 0.0, "pp_comm_s": 0.004 * step,
                           "dp_comm_s": 0.03 * step, "optimizer_s": 0.02 * step},
        "pipeline": {"pp": pp, "vpp": vpp, "num_microbatches": m, "schedule": schedule if pp > 1 else "none",
                     "fwd_s_per_microbatch": fwd, "bwd_s_per_microbatch": [2 * f for f in fwd]},
        "fits": fits, "warnings": list(warnings), "reason": reason,
    }


def sample_result() -> dict:
    return {
        "model": {"name": "llama3-70b", "params_total": 70.6e9, "params_active": 70.6e9, "num_layers": 80},
        "cluster": {"name": "64x h100-sxm", "hardware": "h100-sxm", "count": 64},
        "plans": [
            make_plan(8, 4, 2, vpp=2, schedule="interleaved", m=16, step=12.3, tps=2100.0, mfu=0.41, peak=61.2,
                      reason="TP=8 keeps all-reduces on NVLink; PP=4 x VPP=2 halves the bubble"),
            make_plan(8, 2, 4, step=12.9, tps=2003.0, mfu=0.39, peak=72.5, m=32,
                      reason="fewer stages, more memory", warnings=["activations near capacity"]),
            make_plan(4, 8, 2, step=13.6, tps=1900.0, mfu=0.37, peak=48.0, m=16,
                      reason="TP=4 <script>alert('x')</script> & friends"),
        ],
    }


def sample_candidates() -> list[dict]:
    res = sample_result()
    extra = [
        make_plan(8, 8, 1, step=14.8, tps=1746.0, mfu=0.34, peak=40.5, m=32),  # on the front (least memory)
        make_plan(2, 8, 4, step=15.5, tps=1667.0, mfu=0.33, peak=52.0, m=16),  # dominated by the 3rd ranked
        make_plan(8, 1, 8, step=11.0, tps=2350.0, mfu=0.46, peak=95.0, fits=False),  # faster but does not fit
        make_plan(4, 4, 4, step=13.0, tps=1985.0, mfu=0.39, peak=70.0, m=32),  # dominated by #1
        # dominated by #1 (12.3 s, 61.2 GiB)
        make_plan(8, 2, 4, step=12.5, tps=2066.0, mfu=0.40, peak=78.0, m=32, recompute="none"),
        # front: fastest feasible
        make_plan(8, 4, 2, step=12.1, tps=2135.0, mfu=0.42, peak=77.9, m=32, recompute="none"),
    ]
    return res["plans"] + extra


# --- a strict enough HTML checker ---------------------------------------------------------------
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_SELF_CLOSING_OK = True


class Checker(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.tags: dict[str, int] = {}
        self.urls: list[str] = []
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "poster", "data") and v is not None:
                self.urls.append(v)
            if k == "style" and v and "url(" in v:
                self.urls.append(v)
        if tag == "script":
            self.scripts += 1
            if "src" in a:
                self.errors.append("external script")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            if tag in self.stack:
                while self.stack and self.stack.pop() != tag:
                    pass
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] not in ("style", "script"):
            self.text.append(data)


def check(page: str) -> Checker:
    c = Checker()
    c.feed(page)
    c.close()
    return c


@pytest.fixture(scope="module")
def page() -> str:
    return render_report(sample_result(), sample_candidates())


# --- tests ------------------------------------------------------------------------------------
def test_well_formed(page):
    assert page.startswith("<!DOCTYPE html>")
    c = check(page)
    assert c.errors == []
    assert c.stack == []  # everything closed
    assert len(c.ids) == len(set(c.ids)), "duplicate ids"


def test_has_every_chart_id(page):
    ids = set(check(page).ids)
    for chart in ("plans-table", "pareto", "timeline", "memory-breakdown", "time-breakdown"):
        assert chart in ids
    assert set(CHART_IDS) <= ids


def test_no_network_resources(page):
    c = check(page)
    assert "http://" not in page and "https://" not in page
    assert "//" not in "".join(c.urls)
    assert not re.search(r"@import|url\((?!#)", page)  # CSS only references the inline #hatch pattern
    assert "<link" not in page and "<img" not in page and "<iframe" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert c.scripts == 1  # one inline script, no src


def test_text_is_escaped(page):
    # the hostile reason in the third plan must arrive as text, never as markup
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; friends" in page
    assert "TP=4 <script>alert('x')</script> & friends" in "".join(check(page).text)
    nasty = sample_result()
    nasty["model"]["name"] = '"><svg onload=alert(1)>'
    nasty["plans"][0]["warnings"] = ["<b>bold</b>"]
    out = render_report(nasty)
    assert "<svg onload" not in out and "<b>bold</b>" not in out
    assert check(out).errors == []


def test_plans_table_rows_and_values(page):
    body = page.split('id="plans-table"', 1)[1].split("</table>", 1)[0]
    assert body.count("<tbody") == 3  # one group per ranked plan
    assert body.count("<tr") == 1 + 3 * 2  # header + (numbers, why) per plan
    assert "12.3" in body and "2,100" in body and "41.0%" in body and "61.2" in body
    assert "activations near capacity" in body
    assert 'class="plan best"' in body


def test_pareto_front_function():
    front = pareto_front(sample_candidates())
    got = [(p["step_time_s"], p["memory"]["peak_gib"]) for p in front]
    # fastest feasible first; each next point slower but lighter; the 95 GiB plan does not fit
    assert got == [(12.1, 77.9), (12.3, 61.2), (13.6, 48.0), (14.8, 40.5)]
    assert pareto_front([]) == []
    assert pareto_front([{"step_time_s": 1.0, "memory": {"peak_gib": 1.0}, "fits": False}]) == []


def test_pareto_chart_marks_the_front(page):
    svg = page.split('id="pareto"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="pt front"') == 4
    assert svg.count('class="pt"') == 4  # 9 candidates: 1 does not fit, 4 on the front, 4 dominated
    assert "front-line" in svg
    assert "capacity 79.2 GiB" in svg
    assert "1 that does not fit is not plotted" in page


def test_timeline_chart(page):
    svg = page.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    # best plan: PP=4, VPP=2, 16 micro-batches, interleaved: 4 stages x 16 x 2 chunks x (F, B) passes
    assert svg.count('class="op op-F"') == 4 * 16 * 2
    assert svg.count('class="op op-B"') == 4 * 16 * 2
    assert 'class="bubble"' in svg
    for s in range(4):
        assert f">stage {s}<" in svg
    facts = page.split('id="timeline"', 1)[1].split('class="facts">', 1)[1].split("</p>", 1)[0]
    # the scored bubble, quoted once: the first stage (1.1 x, the slowest) idles (p-1)/v of the other
    # stages' micro-batch time: 3 x 3 x 0.16913 s / 2 = 761 ms, 6.2% of the 12.3 s step
    assert "schedule interleaved" in facts and "16 micro-batches" in facts
    assert "bubble 761 ms = 6.2% of the step (the slowest stage&#x27;s idle time, as scored)" in facts


def test_timeline_large_pipeline_is_drawn_shorter_but_measured_in_full():
    res = sample_result()
    res["plans"][0] = make_plan(8, 8, 1, m=512, step=40.0)
    out = render_report(res)
    svg = out.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    # 128 passes per row at most: 64 micro-batches of F and B
    assert svg.count('class="op op-F"') == 8 * 64
    assert "Drawn with 64 of the 512 micro-batches" in out
    assert "512 micro-batches" in out and "as scored" in out


def test_timeline_interleaved_draws_a_multiple_of_pp():
    res = sample_result()
    res["plans"][0] = make_plan(2, 2, 16, vpp=4, schedule="interleaved", m=64)
    out = render_report(res)
    svg = out.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    # 128 // (4 chunks x 2 passes) = 16 micro-batches drawn, a multiple of pp = 2
    assert svg.count('class="op op-F"') == 2 * 16 * 4
    assert "Drawn with 16 of the 64 micro-batches" in out
    assert "peak in-flight micro-batch chunks per stage: 9, 7" in out  # Megatron: 2(p-s-1) + (v-1)p + 1


def test_header_shows_training_and_search():
    res = sample_result()
    res["training"] = {"global_batch": 1024, "seq_len": 4096, "dtype": "bf16"}
    res["search"] = {"evaluated": 1467, "feasible": 405}
    out = render_report(res)
    assert "global batch 1,024 × 4,096 tokens, bf16" in out
    assert "1,467 plans evaluated, 405 fit" in out


def test_timeline_zero_bubble_shows_w():
    res = sample_result()
    res["plans"][0] = make_plan(8, 4, 2, schedule="zb", m=8)
    out = render_report(res)
    svg = out.split('id="timeline"', 1)[1].split("</svg>", 1)[0]
    assert svg.count('class="op op-W"') == 4 * 8
    assert "weight-gradient (W)" in svg


def test_timeline_unsupported_pipeline_degrades_to_a_note():
    res = sample_result()
    res["plans"][0]["pipeline"]["num_microbatches"] = 6  # interleaved needs m divisible by pp
    out = render_report(res)
    assert "Cannot draw the pipeline schedule" in out
    assert check(out).errors == []
    assert 'id="timeline"' in out


def test_breakdown_charts(page):
    mem = page.split('id="memory-breakdown"', 1)[1].split("</svg>", 1)[0]
    assert mem.count('class="seg"') == 3 * 6  # three plans x six memory parts
    assert mem.count('class="cap"') >= 3  # capacity mark on every bar
    for label in ("weights", "gradients", "optimizer", "activations", "buffers", "overhead"):
        assert f">{label}<" in mem
    tim = page.split('id="time-breakdown"', 1)[1].split("</svg>", 1)[0]
    assert tim.count('class="seg"') == 3 * 7  # CP and EP comm are zero
    assert tim.count('class="total-mark"') == 3 + 1  # one per bar, one in the legend
    assert ">pipeline bubble<" in tim and ">DP comm<" in tim


def test_without_candidates_uses_ranked_plans():
    out = render_report(sample_result())
    svg = out.split('id="pareto"', 1)[1].split("</svg>", 1)[0]
    assert svg.count("<circle") == 3
    assert check(out).errors == []


def test_empty_and_partial_results():
    out = render_report({"model": {"name": "m"}, "cluster": {"name": "c"}, "plans": []})
    c = check(out)
    assert c.errors == [] and set(CHART_IDS) <= set(c.ids)
    assert "No plans in this result" in out
    bare = {"plans": [{"plan": {"tp": 1, "pp": 1, "dp": 8}, "step_time_s": 3.0, "fits": True}]}
    out = render_report(bare)
    assert check(out).errors == [] and set(CHART_IDS) <= set(check(out).ids)


@pytest.mark.parametrize("bad", [None, [], "x", {"plans": "nope"}, {"plans": [1, 2]}])
def test_rejects_non_results(bad):
    with pytest.raises(InputError):
        render_report(bad)


def test_estimate_section():
    res = sample_result()
    est = estimate_for_plan(res["plans"][0], "15T", params_total=70.6e9, restart_s=600.0, price_per_device_hour=2.0)
    out = render_report(res, estimate=est)
    assert 'id="training-estimate"' in out
    assert "goodput" in out and "2407.21783" in out
    assert check(out).errors == []


def test_plan_label():
    assert plan_label(make_plan(8, 4, 2)) == "TP8 PP4 DP2"
    assert plan_label(make_plan(2, 4, 8, vpp=2, cp=2, ep=4)) == "TP2 PP4x2 CP2 DP8 EP4"


def test_deterministic():
    assert render_report(sample_result(), sample_candidates()) == render_report(sample_result(), sample_candidates())
