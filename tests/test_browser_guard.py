"""A web page in the operator's browser cannot drive the coordinator (real Chromium, marker browser).

The page of the attack: served from another origin (another port of 127.0.0.1), it sends
cross-origin ``text/plain`` POSTs (``fetch`` with ``mode: "no-cors"``, and a form) that record a
failure and apply plans p1..p5. The service answers them with refusals: nothing is recorded.
"""

from __future__ import annotations

import http.server
import threading
import time

import httpx
import pytest

from servers import Server
from test_console_browser import CHROMEDRIVER, CHROMIUM, _browser_or_skip
from unicron_plan.io import read_json

from conftest import ROOT

pytestmark = pytest.mark.browser

ATTACK = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{target}/v1/events" target="sink">
<input name='{{"kind": "failure", "failed_nodes": ["n1"], "x": "' value='"}}'></form>
<iframe name="sink"></iframe>
<script>
(async () => {{
  const t = "{target}", body = JSON.stringify({{kind: "failure", failed_nodes: ["n1"]}});
  const tries = [fetch(t + "/v1/events", {{method: "POST", mode: "no-cors", body,
                                         headers: {{"Content-Type": "text/plain"}}}})];
  for (const p of ["p1", "p2", "p3", "p4", "p5"])
    tries.push(fetch(t + "/v1/plans/" + p + "/apply", {{method: "POST", mode: "no-cors"}}));
  await Promise.allSettled(tries);
  document.getElementById("f").submit();
  document.title = "sent";
}})();
</script></body></html>"""


def _page_server(html: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture(scope="module")
def driver():
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture
def coordinator(tmp_path):
    """A serve process without a token (the case the attack aims at) holding a cluster, with one failure
    planned and applied (so p1 exists and p2.. would be the attack's)."""
    inst = read_json(ROOT / "instances" / "tiny-one-job-two-nodes.json")
    inst.pop("event", None)
    with Server(tmp_path / "state", "--no-access-log", "--no-contingency") as srv:
        httpx.put(srv.url + "/v1/cluster", json=inst, timeout=60).raise_for_status()
        yield srv


def _entries(url: str) -> list[tuple[int, str]]:
    return [(e["revision"], e["type"]) for e in httpx.get(url + "/v1/history", timeout=60).json()["entries"]]


def test_a_cross_origin_page_records_nothing(driver, coordinator):
    before = _entries(coordinator.url)
    page, page_url = _page_server(ATTACK.format(target=coordinator.url))
    try:
        driver.get(page_url + "/")
        deadline = time.monotonic() + 60  # a bound on waiting, not a measurement
        while driver.title != "sent" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver.title == "sent", "the page did not run"
        # the form's POST went out with the page's last step; it is answered once the frame has loaded
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and driver.execute_script(
                "try { return frames['sink'].location.href === 'about:blank'; } catch (e) { return false; }"):
            time.sleep(0.1)
    finally:
        page.shutdown()
    assert _entries(coordinator.url) == before  # no event, no plan, no apply
    log = coordinator.log_text()
    assert "Traceback" not in log


def test_hostlist_is_linear_on_a_long_node_id(driver, coordinator):
    """A 1,000,000-digit node id: the old regex took quadratic steps (a 150,000-digit id froze a tab for
    94 s); a scan from the end is linear. The script timeout only bounds a hang."""
    driver.get(coordinator.url + "/")
    driver.set_script_timeout(60)
    long_id = "n" + "1" * 1_000_000 + "x"
    got = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "done([hostlist(['n01', 'n02', 'n03', 'n05', 'gpu7', 'x']), hostlist([arguments[0]]).length,"
        " hostlist(['a' + arguments[1]]).length]);", long_id, "9" * 1_000_000)
    assert got[0] == "n[01-03,05],gpu7,x"
    assert got[1] == len(long_id) and got[2] == 1_000_001

