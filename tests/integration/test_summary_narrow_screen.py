"""The HTML daily summary is readable on a phone: at 390 px nothing but a table's own scroll box is wider than the
screen, the charts' text is at least 11 px, and a table that scrolls sideways shows that it does (a shadow on the
edge that hides more columns; issue 22 item 9), measured in a real browser (Debian's headless Chromium) over the
demo's state.

Chromium's headless window has a minimum width of about 500 px, so the page is laid out in a 390 px iframe and the
probe reads the iframe document: its scroll width, every element that reaches past 390 px outside a `.scroll` box,
the rendered size of every visible chart text (its computed font size × the SVG's scale on screen), and the points
just inside each overflowing scroll box's edges; a screenshot of the same page then shows whether the cue is painted
there. The tests skip when no Chromium is installed (`apt-get install chromium`); the layout rules they check are in
`sinks/summary_report.CSS` and the narrow chart layout in `sinks/chart.trend_svg`.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: The iframe's (and the screenshot's) height: the scroll boxes whose cue is looked at lie above it.
TALL = 3000

HOST = """<!doctype html><html><body style="margin:0"><iframe id=f src="summary.html" width=390 height=TALL_PX
style="border:0;display:block"></iframe><script>document.getElementById('f').addEventListener('load', () => {
  const d = document.getElementById('f').contentDocument; const over = [];
  for (const el of d.querySelectorAll('body *')) {
    if (!el.closest('.scroll') && el.getBoundingClientRect().right > 390.5) over.push(el.tagName);
  }
  const hidden = [...d.querySelectorAll('th')].filter(th => ['wasted', 'USD/day'].includes(th.textContent.trim())
    && th.getBoundingClientRect().right > 390.5).map(th => th.textContent.trim());
  const sizes = [...d.querySelectorAll('svg text')].filter(t => t.getClientRects().length > 0)
    .map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
  const cue = [];
  for (const box of d.querySelectorAll('.scroll')) {
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const r = box.getBoundingClientRect();
    for (const tr of box.querySelectorAll('tr')) {
      const y = tr.getBoundingClientRect().top + 2;
      if (tr.querySelector('td') && y < TALL_PX - 20) cue.push([Math.round(r.left + 3), Math.round(r.right - 3), Math.round(y)]);
    }
  }
  document.body.setAttribute('data-probe', 'W=' + d.documentElement.scrollWidth + ' over=' + over.join(',')
    + ' money=' + hidden.join(',') + ' texts=' + sizes.length + ' font=' + Math.min(...sizes).toFixed(2)
    + ' cue=' + cue.map(p => p.join(',')).join(';'));
});</script></body></html>""".replace("TALL_PX", str(TALL))

PROBE = re.compile(r'data-probe="W=(?P<width>\d+) over=(?P<over>[^" ]*) money=(?P<money>[^" ]*) texts=(?P<texts>\d+) '
                   r'font=(?P<font>[\d.]+|Infinity) cue=(?P<cue>[\d,;]*)"')


def _gpuwaste(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The HTML summary of the demo's state (with the when-the-waste-happens heat tables, --by-hour) and the host
    page around it, served over HTTP (the probe reads the iframe's document: same origin); yields (dir, host URL)."""
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (apt-get install chromium)")
    tmp_path = tmp_path_factory.mktemp("narrow")
    state = tmp_path / "state.db"
    _gpuwaste("demo", "--state", str(state), "-q")
    _gpuwaste("summary", "--state", str(state), "--since", "30d", "--by-hour", "-o", "html",
              "--out", str(tmp_path / "summary.html"))
    page = (tmp_path / "summary.html").read_text()
    assert "<table" in page and "<table class='heat'>" in page and "<svg" in page
    (tmp_path / "host.html").write_text(HOST)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/host.html"
    finally:
        server.shutdown()


def _chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size=600,{TALL}",
                           *args], capture_output=True, text=True, timeout=90).stdout


@pytest.fixture(scope="module")
def probe(served: tuple[Path, str]) -> re.Match[str]:
    """What the probe measured when a real browser laid the summary out 390 px wide."""
    tmp_path, url = served
    found = PROBE.search(_chromium(tmp_path, "--dump-dom", url))
    assert found, "the probe did not run (no layout measured)"
    return found


def test_the_summary_fits_a_390_px_screen(probe: re.Match[str]) -> None:
    # GIVEN the demo's HTML summary laid out by a real browser 390 px wide
    # THEN the page is no wider than the screen and only tables scroll, inside their own box
    assert int(probe["width"]) <= 390, f"page {probe['width']} px wide at 390 px; too wide: {probe['over']}"
    assert probe["over"] == ""
    # AND every table's money columns (wasted, USD/day) are on screen without scrolling the table
    assert probe["money"] == "", f"money columns off a 390 px screen: {probe['money']}"


def test_chart_text_is_at_least_11_px_on_a_390_px_screen(probe: re.Match[str]) -> None:
    # GIVEN the demo's HTML summary laid out 390 px wide, its two trend charts on screen
    # THEN every chart text the reader sees (axis, values, legend, title) is rendered at 11 px or more
    assert int(probe["texts"]) > 20, "no chart text measured"
    assert float(probe["font"]) >= 11, f"chart text rendered at {probe['font']} px on a 390 px screen"


def test_a_table_that_scrolls_sideways_shows_a_cue_on_the_edge_it_hides(served: tuple[Path, str],
                                                                        probe: re.Match[str]) -> None:
    from PIL import Image

    # GIVEN the tables that overflow a 390 px screen (their scroll box is narrower than the table)
    points = [tuple(int(v) for v in p.split(",")) for p in probe["cue"].split(";") if p]
    assert len(points) >= 5, "no overflowing table measured at 390 px"
    # WHEN the same page is painted
    tmp_path, url = served
    shot = tmp_path / "narrow.png"
    _chromium(tmp_path, f"--screenshot={shot}", url)
    image = Image.open(shot).convert("L")
    # THEN just inside the right edge (more columns that way) every row is shaded, and the left edge (nothing
    # scrolled off it yet) is not: the cue says where the rest of the table is
    right = [image.getpixel((x, y)) for _, x, y in points]
    left = [image.getpixel((x, y)) for x, _, y in points]
    assert max(right) < 245, f"no scroll cue on the right edge of an overflowing table (grey levels {right})"
    assert min(left) >= 250, f"a cue on the left edge although nothing is scrolled off it (grey levels {left})"
