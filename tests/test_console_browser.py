"""The web console in a real Chromium (Debian's chromium + chromium-driver, driven by Selenium)
against a real `unicron-plan serve` holding a 2,048-node, 16,384-GPU cluster.

Outside CI the tests skip when the browser is absent; under CI=true they fail instead
(`scripts/install-browser` installs it). Screenshots go to $UNICRON_SCREENSHOTS when set.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from conftest import ROOT
from unicron_plan.io import read_json

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TOKEN = "console-test-token"


def _browser_or_skip() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        reason = f"no browser: {', '.join(missing)} missing (scripts/install-browser installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A serve process (token on) with the cluster applied after one failure and a second failure pending."""
    _browser_or_skip()
    inst = read_json(ROOT / "instances" / "jagged-16384-128jobs.json")
    base = copy.deepcopy(inst)
    first = base.pop("event")
    d = tmp_path_factory.mktemp("console")
    tf = d / "token"
    tf.write_text(TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "unicron_plan.cli", "serve", "--state", str(d / "state"),
                             "--port", "0", "--token-file", str(tf), "--no-access-log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"listening on (http://\S+),", proc.stderr.readline())
        assert m, "no start-up line"
        client = httpx.Client(base_url=m.group(1), headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        client.put("/v1/cluster", json=base).raise_for_status()
        plan = client.post("/v1/events", json=first).json()
        client.post(f"/v1/plans/{plan['plan_id']}/apply").raise_for_status()
        client.post("/v1/events", json={"kind": "failure", "failed_nodes": ["n00100", "n00200"],
                                        "failed_gpus": [{"node": "n00300", "gpu": 2}]}).raise_for_status()
        yield m.group(1), client
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def driver(server):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1500,1700", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        url = server[0]
        drv.get(url + "/")
        drv.execute_script("sessionStorage.setItem('unicron-token', arguments[0])", TOKEN)
        yield drv
    finally:
        drv.quit()


def _wait(drv, script: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = drv.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    msg = drv.execute_script("const m = document.getElementById('message'); return m ? m.textContent : ''")
    raise AssertionError(f"timed out waiting for: {script} (page says: {msg!r})")


def _text(drv, element_id: str) -> str:
    """An element's rendered text, read in the page: the console redraws its parts, so a handle
    found a moment before may be stale by the time its text is asked for."""
    return drv.execute_script(f"const e = document.getElementById('{element_id}'); return e ? e.innerText : null")


def _load(drv, url: str) -> dict:
    """Open the console and wait until it has drawn the state; its timings."""
    drv.get(url + "/")
    return _wait(drv, "const t = window.unicronConsole; return t && t.drawnAt ? t : null")


def _shot(drv, name: str, tmp_path: Path) -> Path:
    out = Path(os.environ.get("UNICRON_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    assert drv.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def test_page_needs_no_outside_asset_and_asks_for_the_token(server, driver, tmp_path):
    url, _ = server
    assert httpx.get(url + "/v1/state").status_code == 401  # reads follow the API's rule
    driver.execute_script("sessionStorage.removeItem('unicron-token')")
    driver.get(url + "/")
    msg = _wait(driver, "const m = document.getElementById('message'); return m && !m.hidden && m.textContent")
    assert "token" in msg
    srcs = driver.execute_script(
        "return [...document.querySelectorAll('script[src],link[href],img[src]')].map(e => e.src || e.href)")
    assert srcs and all(s.startswith(url) or s.startswith("data:") for s in srcs), srcs
    driver.find_element("id", "token").send_keys(TOKEN)
    driver.find_element("css selector", "#token-form button").click()
    _wait(driver, "return window.unicronConsole.drawnAt")
    for page in ("/", "/docs", "/console/console.js", "/console/console.css"):
        text = httpx.get(url + page).text  # public: no state in them
        assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", text), page
        assert "cdn" not in text.lower(), page
    # /docs: the package's own page over /openapi.json (token from the console's session)
    driver.get(url + "/docs")
    ops = _wait(driver, "return document.querySelectorAll('#ops details.op').length")
    spec = httpx.get(url + "/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert ops == sum(len(v) for v in spec["paths"].values())
    _shot(driver, "docs-page.png", tmp_path)


def test_what_is_shown_matches_the_state(server, driver, tmp_path):
    url, client = server
    _load(driver, url)
    state = client.get("/v1/state").json()
    inst = state["instance"]
    shown = driver.execute_script("""
        const nodes = [...document.querySelectorAll('#racks .node')];
        const cells = {};  // GPUs drawn per fill class: cells of mixed nodes, whole alike nodes
        const add = (k, n) => { cells[k] = (cells[k] || 0) + n; };
        for (const i of document.querySelectorAll('#racks .node:not(.solid) i')) add(i.className, 1);
        for (const n of document.querySelectorAll('#racks .node.solid')) add(n.dataset.fill, +n.dataset.gpus);
        return {
          revision: document.getElementById('revision').textContent,
          nodes: nodes.map(n => n.dataset.node),
          failed: nodes.filter(n => n.classList.contains('failed')).map(n => n.dataset.node),
          pending: nodes.filter(n => n.classList.contains('pending')).map(n => n.dataset.node),
          racks: [...document.querySelectorAll('#racks .rack')].map(r => r.dataset.rack),
          cells,
          rows: [...document.querySelectorAll('#jobs tbody tr')].map(r => [r.dataset.job, r.cells[1].textContent, r.cells[5].textContent]),
          event: document.getElementById('pending-event').dataset.kind,
          plan: document.getElementById('plan-tag').textContent,
        };""")
    assert int(shown["revision"]) == state["revision"]
    assert shown["nodes"] == [n["id"] for n in inst["cluster"]["nodes"]]
    assert shown["racks"] == list(dict.fromkeys(n["rack"] for n in inst["cluster"]["nodes"]))
    down = [n["id"] for n in inst["cluster"]["nodes"] if len(n["failed_gpus"]) == n["gpus"]]
    assert down and shown["failed"] == down
    assert shown["pending"] == ["n00100", "n00200", "n00300"] and shown["event"] == "failure"
    # every job's GPUs drawn in its colour (jobs here hold whole nodes: the drawing is exact)
    index = {j["id"]: i for i, j in enumerate(inst["jobs"])}
    pending_gpus = 8 + 8 + 1
    for j in inst["jobs"]:
        assert shown["cells"].get(f"j{index[j['id']]}", 0) + _pending_of(inst, j) == j["current"]["gpus"], j["id"]
    assert shown["cells"]["p"] == pending_gpus
    failed_cells = sum(len(n["failed_gpus"]) for n in inst["cluster"]["nodes"])
    assert shown["cells"]["x"] == failed_cells
    rows = {r[0]: (int(r[1].replace(",", "")), r[2]) for r in shown["rows"]}
    assert rows == {j["id"]: (j["current"]["gpus"], _state_of(inst, j)) for j in inst["jobs"]}
    last = [e for e in client.get("/v1/history").json()["entries"] if e["type"] == "plan"][-1]["body"]
    assert shown["plan"].startswith(last["plan_id"]) and "ready to apply" in shown["plan"]
    diff = driver.execute_script(
        "return [...document.querySelectorAll('#plan .diff tbody tr')].map(r => r.dataset.job)")
    assert sorted(diff) == sorted(j["id"] for j in last["jobs"] if j["action"] not in ("keep", "idle"))
    health = client.get("/healthz").json()
    done, total = _text(driver, "precomputed").replace(",", "").split(" / ")
    assert int(total) == health["precomputed"]["total"] and 0 <= int(done) <= int(total)
    _shot(driver, "console.png", tmp_path)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and " 401 " not in e["message"]
              and "status of 401" not in e["message"]]
    assert not errors, errors  # no script error, no missing file


def _pending_of(inst: dict, job: dict) -> int:
    """GPUs of ``job`` drawn as 'failure pending' (red) instead of its colour."""
    ev = inst["event"]
    whole = set(ev["failed_nodes"])
    gpus = Counter(g["node"] for g in ev["failed_gpus"])
    return sum(8 if n in whole else gpus.get(n, 0) for n in job["current"]["nodes"])


def _state_of(inst: dict, job: dict) -> str:
    ev = inst["event"]
    hit = set(ev["failed_nodes"]) | {g["node"] for g in ev["failed_gpus"]}
    if hit & set(job["current"]["nodes"]):
        return "hit"
    return "running" if job["current"]["gpus"] else "waiting"


def test_16384_gpus_render_in_under_a_second(server, driver, tmp_path):
    url, _ = server
    runs = [_load(driver, url) for _ in range(3)]
    render = statistics.median(r["renderMs"] for r in runs)
    drawn = statistics.median(r["drawnAt"] for r in runs)
    print(f"\nconsole, 16,384 GPUs: render {render:.0f} ms (median of 3; cluster drawing "
          f"{statistics.median(r['clusterMs'] for r in runs):.0f} ms), from navigation to drawn {drawn:.0f} ms")
    assert render < 1000


def test_what_if_and_apply(server, driver, tmp_path):
    from selenium.webdriver.support.ui import Select

    url, client = server
    _load(driver, url)
    before = client.get("/v1/state").json()
    pending = [e for e in client.get("/v1/history").json()["entries"] if e["type"] == "plan"][-1]["body"]
    # apply the pending plan from the page
    driver.find_element("id", "apply").click()
    _wait(driver, f"return +document.getElementById('revision').textContent > {before['revision']}")
    last = client.get("/v1/history").json()["entries"][-1]
    assert last["type"] == "apply" and last["body"]["plan_id"] == pending["plan_id"]
    _wait(driver, "return document.getElementById('plan-tag').textContent.includes('applied')")
    # nodes are picked by clicking them (from the top of the page: the sticky header covers what is above)
    driver.execute_script("window.scrollTo(0, 0)")
    node = driver.find_element("css selector", '#racks .node[data-node="n00007"]')
    node.click()
    assert _text(driver, "picked") == "1 node(s): n00007"
    assert "picked" in node.get_attribute("class")
    node.click()
    assert _text(driver, "picked") == "no node picked"
    # what if rack r0005 fails: the dry run shown is the service's dry run
    Select(driver.find_element("id", "rack-pick")).select_by_visible_text("r0005")
    picked = _wait(driver, "return document.querySelectorAll('#racks .node.picked').length")
    assert picked == 32
    driver.find_element("id", "dry-run").click()
    objective = float(_wait(driver, "const e = document.getElementById('whatif-plan'); return e && e.dataset.objective"))
    nodes = [f"n{i:05d}" for i in range(5 * 32, 6 * 32)]
    body = {"kind": "failure", "failed_nodes": nodes, "failed_gpus": []}
    expected = client.post("/v1/events?dry_run=true", json=body).json()
    assert objective == pytest.approx(expected["objective"], rel=1e-12)
    shown = driver.execute_script(
        "return [...document.querySelectorAll('#whatif-plan .diff tbody tr')].map(r => r.dataset.job)")
    assert sorted(shown) == sorted(j["id"] for j in expected["jobs"] if j["action"] not in ("keep", "idle"))
    driver.execute_script("document.getElementById('whatif-panel').scrollIntoView()")
    _shot(driver, "console-what-if.png", tmp_path)
    assert client.get("/v1/history").json()["entries"][-1] == last  # a dry run records nothing
    # record it, then apply from the page: the rack is drawn down
    rev = client.get("/v1/state").json()["revision"]
    driver.find_element("id", "record").click()
    _wait(driver, f"return +document.getElementById('revision').textContent >= {rev + 1}")  # event (its plan is logged after it)
    plan_id = _wait(driver, "const b = document.getElementById('apply'); return b && b.dataset.plan")
    # (clicked in the page: the panel may be redrawn between finding the button and clicking it)
    _wait(driver, f"const b = document.getElementById('apply'); return b && b.dataset.plan === '{plan_id}' ? (b.click(), true) : false")
    _wait(driver, f"return +document.getElementById('revision').textContent >= {rev + 3}")
    hist = client.get("/v1/history").json()["entries"]
    assert [e["type"] for e in hist[-3:]] == ["event", "plan", "apply"]
    assert hist[-1]["body"]["plan_id"] == plan_id and hist[-3]["body"]["failed_nodes"] == nodes
    down = _wait(driver, "const d = [...document.querySelectorAll('#racks .rack[data-rack=\"r0005\"] .node.failed')];"
                         " return d.length === 32 ? d.length : null")
    assert down == 32
    _shot(driver, "console-applied.png", tmp_path)
    # it updates itself: a change made by another client shows without a reload
    rev = client.get("/v1/state").json()["revision"]
    job = copy.deepcopy(client.get("/v1/state").json()["instance"]["jobs"][0])
    job.update(id="queued-by-another-client", current={"gpus": 0, "nodes": []})
    assert client.post("/v1/jobs", json=job).json() == {"revision": rev + 1}
    _wait(driver, "return document.querySelector('#jobs tr[data-job=\"queued-by-another-client\"]')", timeout=10)
    assert int(_text(driver, "revision")) == rev + 1
