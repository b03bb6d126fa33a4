"""The report page in a real browser: headless Chromium loads ``index.html`` from disk (no server)
and the test fails on any console error or failed load, any image that does not load, any empty
table, a store string with markup that the page did not escape, a sort that does not sort, or a
page wider than a narrow window. A screenshot is saved under the test's ``tmp_path``.

Chromium is driven over the DevTools protocol (``websocket-client``). Where Chromium or
``websocket-client`` is missing the test skips and says why; with ``SFLM_REQUIRE_CHROMIUM=1``
(CI: ``.ci/run``, after ``scripts/setup.sh`` installed Debian's ``chromium``) it fails instead.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
from test_html import HOSTILE, quickstart_like_store

from bench.report import main

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _unavailable(why: str):
    if os.environ.get("SFLM_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"SFLM_REQUIRE_CHROMIUM=1 but {why}")
    pytest.skip(why)


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    _unavailable(
        "no Chromium found (apt-get install chromium; scripts/setup.sh installs it as root)"
    )


class DevTools:
    """A minimal DevTools-protocol session on one page target: commands, and the events that
    arrived meanwhile."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.events: list[dict] = []
        self._id = 0

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hit = next((e for e in self.events if e.get("method") == method), None)
            if hit:
                return hit
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def js(self, expression: str):
        r = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:60]}...: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        self.ws.close()


@pytest.fixture
def chromium(tmp_path):
    """A headless Chromium with remote debugging on a free port; yields a DevTools session."""
    exe = _browser()
    try:
        import websocket  # noqa: F401
    except ImportError:
        _unavailable("websocket-client is not installed (pip install -e .[dev])")
    profile = tmp_path / "chromium-profile"
    args = [
        exe,
        "--headless=new",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--remote-debugging-port=0",
        "--remote-allow-origins=*",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        "about:blank",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses its sandbox as root
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port_file = profile / "DevToolsActivePort"
    end = time.monotonic() + 60
    while not port_file.is_file() or not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            err = proc.stderr.read().decode(errors="replace")[-2000:]
            pytest.fail(f"Chromium did not start: {err}")
        time.sleep(0.1)
    port = int(port_file.read_text().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
        pages = [t for t in json.loads(r.read()) if t.get("type") == "page"]
    dt = DevTools(pages[0]["webSocketDebuggerUrl"])
    try:
        yield dt
    finally:
        dt.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif m == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')} ({p.get('requestId')})")
    return out


_CHECKS = """(() => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
  const tables = [...document.querySelectorAll("table")];
  const empty = tables.filter(t => !t.tBodies.length || !t.tBodies[0].rows.length)
    .map(t => t.outerHTML.slice(0, 120));
  return {images: imgs.length, svg: imgs.filter(i => i.currentSrc.endsWith(".svg")).length,
          broken, tables: tables.length, empty, title: document.title,
          text: document.body.innerText, injected: document.querySelectorAll("img[src=x]").length};
})()"""

# the samples view (sudoku_samples.md): its tables, their rows, its text (folded ones included)
_SAMPLES = """(() => {
  const a = document.getElementById("f-sudoku_samples-md");
  if (!a) return null;
  const tables = [...a.querySelectorAll("table.sortable")];
  return {tables: tables.length, rows: tables.map(t => t.tBodies[0].rows.length),
          text: a.textContent};
})()"""

# sort the first table with a numeric column by it: returns the column before and after
_SORT = """(() => {
  for (const t of document.querySelectorAll("table.sortable")) {
    const heads = [...t.tHead.rows[0].cells];
    const col = heads.findIndex(h => h.textContent.trim() === "easy");
    if (col < 0 || t.tBodies[0].rows.length < 3) continue;
    const read = () => [...t.tBodies[0].rows].map(r => parseFloat(r.cells[col].textContent));
    const before = read();
    heads[col].querySelector("button").click();
    const asc = read();
    heads[col].querySelector("button").click();
    return {before, asc, desc: read(), sort: heads[col].getAttribute("aria-sort")};
  }
  return null;
})()"""


def test_page_loads_in_chromium(tmp_path, chromium):
    quickstart_like_store(tmp_path / "results", hostile=HOSTILE)
    assert main(["--results-dir", str(tmp_path / "results"), "--paper", "--mc-trials", "200"]) == 0
    assert main(["--results-dir", str(tmp_path / "results")]) == 0
    page = tmp_path / "results" / "report" / "index.html"
    dt = chromium
    for domain in ("Runtime", "Log", "Page", "Network"):
        dt.call(f"{domain}.enable")
    dt.call("Page.navigate", url=page.resolve().as_uri())
    dt.wait_for("Page.loadEventFired")
    r = dt.js(_CHECKS)
    assert not _errors(dt.events), _errors(dt.events)
    assert r["images"] >= 3 and not r["broken"], r["broken"]
    assert r["svg"] == r["images"], "the page shows the SVG where there is one"
    assert r["tables"] >= 5 and not r["empty"], r["empty"]
    # the store string with markup is shown as text and did nothing
    assert r["injected"] == 0 and "pwned" not in r["title"]
    assert "<img src=x onerror=" in r["text"]
    # the samples view: what the models wrote, the hostile output as text (its tables folded)
    v = dt.js(_SAMPLES)
    assert v is not None and v["tables"] >= 3 and min(v["rows"]) >= 6, v
    assert HOSTILE + "grid 0 by mdlm" in v["text"] and "<b>of</b>" in v["text"], v["text"][:300]
    # sortable: ascending, then descending, by value
    s = dt.js(_SORT)
    assert s is not None, "no table with an 'easy' column"
    assert s["asc"] == sorted(s["before"]) and s["desc"] == sorted(s["before"], reverse=True)
    assert s["sort"] == "descending"
    shot = dt.call("Page.captureScreenshot", format="png")
    (tmp_path / "page.png").write_bytes(base64.b64decode(shot["data"]))
    assert (tmp_path / "page.png").stat().st_size > 10_000
    # a narrow window: the page itself never scrolls sideways (wide tables scroll in place)
    dt.call(
        "Emulation.setDeviceMetricsOverride",
        width=400,
        height=800,
        deviceScaleFactor=1,
        mobile=True,
    )
    dt.call("Page.reload")
    time.sleep(1.0)
    width = dt.js("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width
    shot = dt.call("Page.captureScreenshot", format="png")
    (tmp_path / "page-narrow.png").write_bytes(base64.b64decode(shot["data"]))
    assert not _errors(dt.events), _errors(dt.events)
