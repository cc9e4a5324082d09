"""The HTML report in a real headless browser: every chart lays out, the script runs, nothing loads.

Needs Debian's Chromium:

    apt-get update && apt-get install -y chromium

Skipped when no Chromium is found, unless PLANNER_REQUIRE_CONSUMERS=1, in which case a missing
browser fails the test (CI sets it). PLANNER_CHROMIUM may name the binary.

The browser runs with
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
             --disable-background-networking --disable-component-update --disable-sync
             --user-data-dir=<tmp> --dump-dom | --screenshot=<png> file://<report>
and, belt and braces on top of the page's own Content-Security-Policy, a host-resolver rule that
resolves no name at all.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from planner.ui.report import CHART_IDS, render_report

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("_report_fixtures", Path(__file__).with_name("test_report.py"))
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)  # the hand-written plans of test_report.py


def _chromium() -> str | None:
    env = os.environ.get("PLANNER_CHROMIUM")
    if env:
        return env if shutil.which(env) or Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _chromium()
    if path is None:
        msg = "Chromium not found (apt-get update && apt-get install -y chromium)"
        if os.environ.get("PLANNER_REQUIRE_CONSUMERS") == "1":
            pytest.fail(msg + "; PLANNER_REQUIRE_CONSUMERS=1 requires it")
        pytest.skip(msg)
    return path


def _run(chromium: str, tmp: Path, *args: str, window: str = "1280,2600") -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}", f"--window-size={window}",
        "--virtual-time-budget=5000", *args,
    ]
    env = {**os.environ, "HOME": str(tmp)}  # keep Chromium's crash/config files out of the real home
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)


def _write(tmp: Path, result: dict, candidates=None) -> Path:
    page = tmp / "report.html"
    page.write_text(render_report(result, candidates), encoding="utf-8")
    return page


class _Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.body: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}
        self.rendered_ids: set[str] = set()
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag == "body":
            self.body = a
        if tag == "script":
            self.scripts += 1
        if a.get("data-rendered") == "1" and "id" in a:
            self.rendered_ids.add(a["id"])


def _dump(chromium: str, tmp: Path, page: Path) -> _Dom:
    proc = _run(chromium, tmp, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<body" in proc.stdout, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    return dom


def test_charts_render_in_chromium(chromium, tmp_path):
    page = _write(tmp_path, _fixtures.sample_result(), _fixtures.sample_candidates())
    dom = _dump(chromium, tmp_path, page)
    # the inline script ran, found every chart with a non-empty box, and said so
    assert dom.body.get("data-rendered") == "1", dom.body
    assert dom.body.get("data-charts-rendered") == str(len(CHART_IDS))
    assert {"pareto", "timeline", "memory-breakdown", "time-breakdown"} <= dom.rendered_ids
    assert dom.counts.get("svg", 0) >= 4
    # 9 candidates with 1 infeasible -> 8 points; 4x16x2x2 = 256 passes in the Gantt chart
    assert dom.counts.get("circle", 0) == 8
    assert dom.counts.get("rect", 0) > 256
    assert int(dom.body.get("data-shapes") or 0) > 300
    # the hostile plan reason stayed text: our one script is the only one
    assert dom.scripts == 1


def test_zero_bubble_and_empty_results_render(chromium, tmp_path):
    res = _fixtures.sample_result()
    res["plans"][0] = _fixtures.make_plan(8, 4, 2, schedule="zb", m=8)
    dom = _dump(chromium, tmp_path, _write(tmp_path, res))
    assert dom.body.get("data-rendered") == "1"
    empty = _dump(chromium, tmp_path, _write(tmp_path, {"model": {"name": "m"}, "cluster": {}, "plans": []}))
    # an empty result still renders a page; the charts say there is nothing to draw
    assert "data-rendered" in empty.body
    assert empty.counts.get("svg", 0) >= 4


def _png_info(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the decompressed image) of a PNG, without Pillow."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    return width, height, len(set(raw[: 4_000_000]))


def test_screenshot_is_drawn(chromium, tmp_path):
    page = _write(tmp_path, _fixtures.sample_result(), _fixtures.sample_candidates())
    shot = tmp_path / "report.png"
    proc = _run(chromium, tmp_path, f"--screenshot={shot}", page.as_uri(), window="1280,2600")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    width, height, distinct = _png_info(data)
    assert (width, height) == (1280, 2600)
    assert len(data) > 50_000  # a blank page compresses to a few KB
    assert distinct > 64  # many colours: charts, text, anti-aliasing


def test_page_loads_nothing_from_the_network(tmp_path):
    # static guarantee the browser tests rely on (no browser needed)
    html = render_report(_fixtures.sample_result(), _fixtures.sample_candidates())
    assert not re.search(r"(?i)\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//", html)
    assert "http://" not in html and "https://" not in html
