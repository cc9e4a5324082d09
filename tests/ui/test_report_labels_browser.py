"""Issue 27: the HTML report's labels are whole at 1280 px for MoE layouts, in a real Chromium.

The MoE layouts' names ("#2 TP4 PP1 DP256 EP128 ETP4") are longer than the 150-unit margin the memory and
step-time charts had: Chromium clipped them at the SVG's edge, and the Pareto chart's "#1"/"#2" labels of
two close points were drawn over each other. A measuring script appended to the page (the report's CSP
allows inline scripts) records every SVG text box that leaves its chart or overlaps another label; the page
is then dumped and screenshotted at a 1280 px wide window. Needs Chromium (see test_report_browser.py)."""

from __future__ import annotations

import importlib.util
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from planner import app
from planner.ui.report import render_report

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("_report_browser", Path(__file__).with_name("test_report_browser.py"))
_browser = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_browser)
chromium = _browser.chromium  # the fixture: Chromium or a skip (a failure under PLANNER_REQUIRE_CONSUMERS=1)

MEASURE_JS = r"""
(function(){
 function hit(a,b){return Math.min(a.right,b.right)-Math.max(a.left,b.left)>1
  &&Math.min(a.bottom,b.bottom)-Math.max(a.top,b.top)>1;}
 function check(){
  var clipped=[],overlaps=[],texts=0;
  document.querySelectorAll('svg.chart').forEach(function(svg){
   var sb=svg.getBoundingClientRect();
   var ts=Array.prototype.filter.call(svg.querySelectorAll('text'),
    function(t){return !t.classList.contains('op-label');});
   var bs=ts.map(function(t){return t.getBoundingClientRect();});
   ts.forEach(function(t,i){var b=bs[i];if(!b.width)return;texts++;
    if(b.left<sb.left-0.5||b.right>sb.right+0.5||b.top<sb.top-0.5||b.bottom>sb.bottom+0.5)
     clipped.push(svg.id+': '+t.textContent);});
   for(var i=0;i<ts.length;i++)for(var j=i+1;j<ts.length;j++)
    if(bs[i].width&&bs[j].width&&hit(bs[i],bs[j]))overlaps.push(svg.id+': '+ts[i].textContent+' / '+ts[j].textContent);
  });
  document.body.setAttribute('data-texts',String(texts));
  document.body.setAttribute('data-clipped',JSON.stringify(clipped));
  document.body.setAttribute('data-overlaps',JSON.stringify(overlaps));
 }
 window.addEventListener('load',check);
})();
"""


def _with_measure(html: str) -> str:
    """The page with the measuring script appended and allowed by its Content-Security-Policy (which lists the
    hashes of the scripts it runs: the report's own one only)."""
    import base64
    import hashlib
    import re

    digest = base64.b64encode(hashlib.sha256(MEASURE_JS.encode()).digest()).decode()
    html, n = re.subn(r"script-src ([^;\"]*)", lambda m: f"script-src {m.group(1)} 'sha256-{digest}'", html, count=1)
    assert n == 1, "the report's CSP names its scripts"
    return html.replace("</body>", f"<script>{MEASURE_JS}</script></body>")


class _Body(HTMLParser):
    attrs: dict = {}

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.attrs = dict(attrs)


def _moe_report(model: str, cluster: str) -> tuple[str, dict]:
    ctx, res, doc = app.run_search(app.PlanRequest(model=model, cluster=cluster))
    candidates = [{"plan": e.plan.knobs(), "step_time_s": e.step_time_s, "memory": {"peak_gib": e.memory["peak_gib"]},
                   "fits": e.fits} for e in res.ranked]
    return render_report(doc, candidates), doc


@pytest.mark.parametrize("model, cluster", [("mixtral-8x7b", "h100x64"), ("deepseek-v3", "h100x1024")])
def test_moe_labels_are_whole_at_1280px(chromium, tmp_path, model, cluster):
    html, doc = _moe_report(model, cluster)
    # the layouts are MoE ones with long names (EP and ETP in the label)
    assert any(p["plan"]["ep"] > 1 for p in doc["plans"])
    page = tmp_path / "report.html"
    page.write_text(_with_measure(html), encoding="utf-8")
    proc = _browser._run(chromium, tmp_path, "--dump-dom", page.as_uri(), window="1280,2600")
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = _Body()
    body.feed(proc.stdout)
    assert int(body.attrs.get("data-texts") or 0) > 40  # the script ran and measured the charts' labels
    assert json.loads(body.attrs["data-clipped"]) == []
    assert json.loads(body.attrs["data-overlaps"]) == []
    shot = tmp_path / "report.png"
    proc = _browser._run(chromium, tmp_path, f"--screenshot={shot}", page.as_uri(), window="1280,2600")
    assert proc.returncode == 0, proc.stderr[-2000:]
    width, _, distinct = _browser._png_info(shot.read_bytes())
    assert width == 1280 and distinct > 64


def test_a_warning_every_plan_carries_is_said_once():
    html, doc = _moe_report("mixtral-8x7b", "h100x64")
    # dropless MoE charged at balanced routing: every plan has it (others, e.g. an EP group across nodes, some only)
    common = next(w for w in doc["plans"][0]["warnings"] if w.startswith("dropless MoE"))
    assert all(common in p["warnings"] for p in doc["plans"]) and len(doc["plans"]) > 1
    from planner.ui.report import _e

    assert html.count(_e(common)) == 1
    assert "Every plan below:" in html
