"""The HTML daily summary is readable on a phone: at 390 px nothing but a table's own scroll box is wider than the
screen (issue 22 item 9), measured in a real browser (Debian's headless Chromium) over the demo's state.

Chromium's headless window has a minimum width of about 500 px, so the page is laid out in a 390 px iframe and the
probe reads the iframe document's scroll width and every element that reaches past 390 px outside a `.scroll` box.
The test skips when no Chromium is installed (`apt-get install chromium`); the layout rules it checks are also in
`sinks/summary_report.CSS`.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

HOST = """<!doctype html><html><body style="margin:0"><iframe id=f src="summary.html" width=390 height=2400
style="border:0"></iframe><script>document.getElementById('f').addEventListener('load', () => {
  const d = document.getElementById('f').contentDocument; const over = [];
  for (const el of d.querySelectorAll('body *')) {
    if (!el.closest('.scroll') && el.getBoundingClientRect().right > 390.5) over.push(el.tagName);
  }
  const hidden = [...d.querySelectorAll('th')].filter(th => ['wasted', 'USD/day'].includes(th.textContent.trim())
    && th.getBoundingClientRect().right > 390.5).map(th => th.textContent.trim());
  document.body.setAttribute('data-probe', 'W=' + d.documentElement.scrollWidth + ' over=' + over.join(',')
    + ' money=' + hidden.join(','));
});</script></body></html>"""


def _gpuwaste(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium)")
def test_the_summary_fits_a_390_px_screen(tmp_path: Path) -> None:
    # GIVEN the HTML summary of the demo's state, with the when-the-waste-happens heat tables (--by-hour)
    state = tmp_path / "state.db"
    _gpuwaste("demo", "--state", str(state), "-q")
    _gpuwaste("summary", "--state", str(state), "--since", "30d", "--by-hour", "-o", "html",
              "--out", str(tmp_path / "summary.html"))
    assert "<table" in (tmp_path / "summary.html").read_text()
    assert "<table class='heat'>" in (tmp_path / "summary.html").read_text()
    (tmp_path / "host.html").write_text(HOST)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # WHEN a real browser lays it out 390 px wide
        assert CHROMIUM is not None
        dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=600,900",
                              "--dump-dom", f"http://127.0.0.1:{server.server_address[1]}/host.html"],
                             capture_output=True, text=True, timeout=90).stdout
    finally:
        server.shutdown()
    probe = re.search(r'data-probe="W=(\d+) over=([^" ]*) money=([^"]*)"', dom)
    assert probe, "the probe did not run (no layout measured)"
    # THEN the page is no wider than the screen and only tables scroll, inside their own box
    assert int(probe.group(1)) <= 390, f"page {probe.group(1)} px wide at 390 px; too wide: {probe.group(2)}"
    assert probe.group(2) == ""
    # AND every table's money columns (wasted, USD/day) are on screen without scrolling the table
    assert probe.group(3) == "", f"money columns off a 390 px screen: {probe.group(3)}"
