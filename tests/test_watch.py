"""The training side of in-band detection: `unicron_plan.watch`, `unicron-plan watch` and the node readers."""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from unicron_plan.faults.signals import CLASSES, classify_exception, classify_text
from unicron_plan.faults.xid import XID_CATALOGUE, parse_dcgmi_health, parse_kernel_line, read_kernel_log
from unicron_plan.watch import Watch, supervise

ROOT = Path(__file__).resolve().parents[1]


class Recorder:
    """A loopback HTTP server that records the signals POSTed to it (and may answer an error)."""

    def __init__(self, status: int = 200):
        self.signals: list[dict] = []
        self.headers: list[dict] = []
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                rec.headers.append(dict(self.headers))
                rec.signals += json.loads(body)["signals"]
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kinds(self) -> list[str]:
        return [s["kind"] for s in self.signals]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    r = Recorder()
    yield r
    r.close()


def _wait(pred, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_import_is_standard_library_only():
    code = ("import sys, unicron_plan.watch; heavy = {'numpy', 'pydantic', 'typer', 'fastapi', 'httpx', 'rich', "
            "'yaml', 'networkx', 'prometheus_client', 'starlette'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("text,kind", [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ecc_error"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for "
     "600000 milliseconds before timing out.", "nccl_timeout"),
    ("node12:2211:2300 [0] NCCL WARN NET/IB : Got completion from peer with error 12", "other_network_error"),
    ("NCCL WARN Cuda failure 'an illegal memory access was encountered'", "illegal_memory_access"),
    ("nvlink error: NVLink link 3 is down", "nvlink_error"),
    ("NVRM: Xid (PCI:0000:3b:00): 74, pid=2211, NVLink: fatal error detected on link 5", "nvlink_error"),
    ("ConnectionRefusedError: [Errno 111] Connection refused", "connection_refused"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "connection_reset"),
    ("epoch 3 loss 2.31", None),
])
def test_text_classification(text, kind):
    assert classify_text(text) == kind
    assert kind is None or kind in CLASSES


def test_exception_classification():
    assert classify_exception(RuntimeError("CUDA error: misaligned address")) == "illegal_memory_access"
    assert classify_exception(ConnectionRefusedError(111, "x")) == "connection_refused"
    assert classify_exception(TimeoutError()) == "other_network_error"
    assert classify_exception(MemoryError()) == "out_of_memory"
    assert classify_exception(ValueError("bad shape")) == "other_software_error"


def test_steps_become_heartbeats_and_close_ends(recorder):
    w = Watch(recorder.url, job="7", rank=2, node="n1", heartbeat_interval=0.05)
    for _ in range(5):
        time.sleep(0.01)
        w.step()
    _wait(lambda: any(s.get("step") == 5 for s in recorder.signals))
    w.close()
    beats = [s for s in recorder.signals if s["kind"] == "heartbeat"]
    assert beats and beats[-1]["step"] == 5 and beats[-1]["job"] == "7" and beats[-1]["rank"] == 2
    assert all(s["iteration_seconds"] > 0 for s in beats)
    assert recorder.kinds()[-1] == "closed" and w.lost == 0
    w.report("cuda_error", "after the end")  # a closed watch drops and counts it
    assert w.lost == 1


def test_exception_is_reported_classified_and_reraised(recorder, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with pytest.raises(RuntimeError, match="illegal memory"):
        with Watch(recorder.url, job="7", rank=0, node="n1", token_file=str(token)):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    err = [s for s in recorder.signals if s["kind"] != "heartbeat"]
    assert [s["kind"] for s in err] == ["illegal_memory_access"]
    assert err[0]["source"] == "exception" and "illegal memory access" in err[0]["evidence"]
    assert recorder.headers[0]["Authorization"] == "Bearer s3cret"
    # KeyboardInterrupt is no training error: a clean close, re-raised
    with pytest.raises(KeyboardInterrupt):
        with Watch(recorder.url, job="7", rank=1):
            raise KeyboardInterrupt
    assert recorder.kinds()[-1] == "closed"


def test_coordinator_down_costs_no_wait_and_losses_are_counted():
    from servers import free_port

    w = Watch(f"http://127.0.0.1:{free_port()}", job="1", rank=0, heartbeat_interval=0.02)
    for _ in range(10_000):
        w.step()
    _wait(lambda: w.lost > 0)
    w.report("cuda_error", "CUDA error: x")  # returns: the sender is backing off
    assert w.lost >= 1 and w.sent == 0 and w.steps == 10_000
    w.close()


def test_errors_answered_with_an_error_status_count_as_lost():
    r = Recorder(status=500)
    try:
        w = Watch(r.url, job="1", rank=0, heartbeat_interval=0.02)
        w.step()
        _wait(lambda: w.lost > 0)
        assert w.lost >= 1 and w.sent == 0
        w.stop()
    finally:
        r.close()


def test_bad_coordinator_url():
    with pytest.raises(ValueError, match="coordinator"):
        Watch("ftp://x", job="1", rank=0)


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "unicron_plan.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, **kw)


def test_watch_command_passes_output_through_and_reports(recorder):
    script = ("import sys; print('step 1'); sys.stderr.write('warming up\\n'); "
              "sys.stderr.write('RuntimeError: CUDA error: an illegal memory access was encountered\\n'); sys.exit(3)")
    out = _cli("watch", "--coordinator", recorder.url, "--job", "9", "--rank", "1", "--node", "n2", "--",
               sys.executable, "-c", script)
    assert out.returncode == 3
    assert out.stdout == "step 1\n"
    assert out.stderr.startswith("warming up\nRuntimeError: CUDA error: an illegal memory access")
    kinds = recorder.kinds()
    assert kinds == ["illegal_memory_access", "exited_abnormally"]
    assert recorder.signals[1]["exit_code"] == 3 and recorder.signals[1]["node"] == "n2"
    assert recorder.signals[0]["source"] == "stderr"


def test_watch_command_reports_a_signal_death(recorder):
    out = _cli("watch", "--coordinator", recorder.url, "--job", "9", "--rank", "0", "--",
               sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert out.returncode == 128 + 9
    assert recorder.kinds() == ["exited_abnormally"] and recorder.signals[0]["signal"] == 9


def test_watch_command_forwards_signals_and_a_stop_is_no_failure(recorder, tmp_path):
    ready = tmp_path / "ready"
    script = (f"import signal, sys, time, pathlib\n"
              f"signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(0)))\n"
              f"pathlib.Path({str(ready)!r}).write_text('x')\n"
              f"time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "unicron_plan.cli", "watch", "--coordinator", recorder.url,
                             "--job", "9", "--rank", "0", "--", sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    _wait(ready.exists, 60)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out == "got TERM\n" and proc.returncode == 0
    assert recorder.kinds() == ["closed"]


def test_watch_command_outlives_a_broken_stderr(recorder, tmp_path):
    go, done = tmp_path / "go", tmp_path / "done"
    script = (f"import pathlib, sys, time\n"
              f"sys.stderr.write('first\\n'); sys.stderr.flush()\n"
              f"for _ in range(6000):\n"
              f"    if pathlib.Path({str(go)!r}).exists(): break\n"
              f"    time.sleep(0.01)\n"
              f"for k in range(50): sys.stderr.write(f'line {{k}}\\n'); sys.stderr.flush()\n"
              f"sys.stderr.write('RuntimeError: CUDA error: device-side assert triggered\\n')\n"
              f"pathlib.Path({str(done)!r}).write_text('x')\n"
              f"sys.exit(5)\n")
    proc = subprocess.Popen([sys.executable, "-m", "unicron_plan.cli", "watch", "--coordinator", recorder.url,
                             "--job", "9", "--rank", "0", "--", sys.executable, "-c", script],
                            stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stderr.readline() == b"first\n"
        proc.stderr.close()  # whoever read watch's stderr went away
        go.write_text("x")
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert code == 5 and done.exists()  # it waited for the command and ended with its status
    assert recorder.kinds() == ["cuda_error", "exited_abnormally"] and recorder.signals[1]["exit_code"] == 5


def test_watch_command_needs_a_coordinator():
    env = {k: v for k, v in os.environ.items() if k not in ("UNICRON_COORDINATOR",)}
    out = _cli("watch", "--job", "1", "--rank", "0", "--", "true", env=env)
    assert out.returncode == 2 and "--coordinator" in out.stderr and "Traceback" not in out.stderr


def test_watch_command_that_cannot_run_exits_as_a_shell_would(recorder, tmp_path):
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\necho never\n")
    plain.chmod(0o644)
    for cmd, code in ((str(tmp_path / "missing-command"), 127), (str(plain), 126), (str(tmp_path), 126)):
        out = _cli("watch", "--coordinator", recorder.url, "--job", "9", "--rank", "0", "--", cmd)
        assert out.returncode == code, out.stderr
        assert out.stderr.count("\n") == 1 and cmd in out.stderr and "internal error" not in out.stderr
    assert recorder.kinds() == ["exited_abnormally"] * 3
    assert [s["exit_code"] for s in recorder.signals] == [127, 126, 126]


def test_watch_rank_from_the_environment_must_be_a_rank(recorder):
    env = {**os.environ, "RANK": "abc"}
    out = _cli("watch", "--coordinator", recorder.url, "--job", "1", "--", sys.executable, "-c", "pass", env=env)
    assert out.returncode == 2 and "--rank" in out.stderr and "$RANK='abc'" in out.stderr
    assert "Traceback" not in out.stderr and recorder.signals == []
    # a rank given on the command line is used; the environment's is then not read
    out = _cli("watch", "--coordinator", recorder.url, "--job", "1", "--rank", "0", "--",
               sys.executable, "-c", "pass", env=env)
    assert out.returncode == 0, out.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RANK", "-1")
        with pytest.raises(ValueError, match=r"\$RANK='-1' is not a rank"):
            Watch.from_env(coordinator=recorder.url, job="1")


# ----------------------------------------------------------------------------- node readers
# Lines in the driver's formats (NVIDIA "Xid Errors" documentation: "NVRM: Xid (PCI:<address>): <code>, ..."; older
# drivers print the address without "PCI:"), behind dmesg, journalctl -k and syslog prefixes.
KERNEL_LOG = """\
[ 1021.402335] nvidia-nvlink: Nvlink Core is being initialized
Dec 05 08:00:01 gpu-n3 kernel: NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7
Dec 05 08:00:01 gpu-n3 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=2211, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.
[ 1188.100212] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
<4>[ 2001.000001] NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
Dec  5 08:03:10 gpu-n3 kernel: [ 2002.5] NVRM: GPU 0000:af:00.0: GPU has fallen off the bus.
[ 2100.0] NVRM: Xid (0000:03:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address
[ 2101.0] NVRM: Xid (PCI:0000:3b:00): 31, pid=3310, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3b_8c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
[ 2102.0] NVRM: Xid (PCI:0000:3b:00): 74, pid=3310, name=python3, NVLink: fatal error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)
[ 2103.0] NVRM: Xid (PCI:0000:3b:00): 94, pid=3310, name=python3, Contained: SM (0x1). RST: No, D-RST: No
[ 2104.0] NVRM: Xid (PCI:0000:3b:00): 95, pid=3310, name=python3, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No
[ 2105.0] NVRM: Xid (PCI:0000:3b:00): 119, pid=3310, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU0 GSP!
[ 2106.0] NVRM: Xid (PCI:0000:3b:00): 999, something new
[ 2107.0] usb 1-1: new high-speed USB device number 2 using xhci_hcd
"""


def test_kernel_xid_lines():
    events = list(read_kernel_log(KERNEL_LOG.splitlines()))
    got = [(e.pci, e.code, e.kind) for e in events]
    assert got == [("0000:3b:00", 48, "ecc_error"), ("0000:10:1c", 63, "ecc_error"),
                   ("0000:86:00", 79, "gpu_driver_error"), ("0000:af:00.0", 79, "gpu_driver_error"),
                   ("0000:03:00", 13, "cuda_error"), ("0000:3b:00", 31, "illegal_memory_access"),
                   ("0000:3b:00", 74, "nvlink_error"), ("0000:3b:00", 94, "ecc_error"),
                   ("0000:3b:00", 95, "ecc_error"), ("0000:3b:00", 119, "gpu_driver_error"),
                   ("0000:3b:00", 999, "gpu_driver_error")]
    assert events[0].pid == 2211 and events[0].name == "Double Bit ECC Error" and events[2].pid is None
    assert CLASSES[events[0].kind].severity == "SEV1" and CLASSES[events[4].kind].severity == "SEV2"
    assert all(kind in CLASSES for _, kind in XID_CATALOGUE.values())
    assert parse_kernel_line("NVRM: Xid (PCI:zz): 48, x") is None
    assert list(read_kernel_log(KERNEL_LOG.splitlines(), max_lines=3)) == events[:1]


# Shaped as DCGM prints `dcgmi health -c -j`: nested "children" objects with "value" leaves.
DCGMI = {"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": {
    "0": {"children": {"Health": {"value": "Failure"},
                       "Memory": {"children": {"Health": {"value": "Failure"},
                                               "Errors": {"children": {"0": {"value": "A double-bit ECC error "
                                                                             "has occurred on GPU 0."}}}}},
                       "NVLink": {"children": {"Health": {"value": "Warning"},
                                               "Error": {"value": "Detected 12 NVLink CRC errors."}}},
                       "PCIe": {"children": {"Health": {"value": "Healthy"}}}}},
    "1": {"children": {"Health": {"value": "Healthy"}}}}}}, "header": ["Health Monitor Report"]}


def test_dcgmi_health_findings():
    found = parse_dcgmi_health(json.dumps(DCGMI))
    assert [(f.gpu, f.system, f.kind) for f in found] == [("0", "memory", "ecc_error"),
                                                          ("0", "nvlink", "nvlink_error")]
    assert "double-bit ECC" in found[0].message and "CRC" in found[1].message
    assert parse_dcgmi_health(json.dumps({"body": {"GPU": {"children": {}}}})) == []
    deep: dict = {"Health": {"value": "Failure"}}
    for _ in range(200):  # deeper than MAX_DEPTH is not walked
        deep = {"children": {"Memory": deep}}
    assert parse_dcgmi_health(json.dumps(deep)) == []


def test_watch_node_reports_each_gpu_and_kind_once(recorder, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(KERNEL_LOG + KERNEL_LOG)
    dcgm = tmp_path / "health.json"
    dcgm.write_text(json.dumps(DCGMI))
    out = _cli("watch-node", "--coordinator", recorder.url, "--node", "gpu-n3", "--kernel-log", str(log),
               "--dcgmi", str(dcgm), "--since", "all")
    assert out.returncode == 0, out.stderr
    assert all(s["node"] == "gpu-n3" and s.get("job") is None for s in recorder.signals)
    pairs = {(e.kind, e.pci) for e in read_kernel_log(KERNEL_LOG.splitlines())}  # 48, 94, 95 on 3b:00: one
    assert len(pairs) == 8 and len(recorder.signals) == len(pairs) + 2
    assert {s["source"] for s in recorder.signals} == {"kernel", "dcgm"}
    bad = _cli("watch-node", "--coordinator", recorder.url, "--dcgmi", str(log))
    assert bad.returncode == 2 and "--dcgmi" in bad.stderr


def test_watch_node_reports_an_xid_line_once_and_never_an_old_one(recorder, tmp_path):
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t))  # noqa: E731
    old = f"{stamp(now - 3600)} n6 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=1, Row Remapper: New row marked"
    dmesg = "[ 12.5] NVRM: Xid (PCI:0000:3c:00): 79, pid=1, GPU has fallen off the bus."  # a time since boot
    log = tmp_path / "kern.log"
    days_ago = time.strftime("%b %d %H:%M:%S", time.localtime(now - 3 * 86400))  # journalctl -o short: no year
    older = f"{days_ago} n6 kernel: NVRM: Xid (PCI:0000:3d:00): 48, pid=1, DBE"
    log.write_text(f"{old}\n{older}\n{dmesg}\n")
    args = ("watch-node", "--coordinator", recorder.url, "--node", "n6", "--kernel-log", str(log))
    # by default a line logged before watch-node started is not reported: run again and again, no report
    for _ in range(2):
        out = _cli(*args)
        assert out.returncode == 0, out.stderr
    assert recorder.signals == []
    # with a state file a periodic run reports each new line once
    state = tmp_path / "xid.state"
    assert _cli(*args, "--state", str(state)).returncode == 0 and recorder.signals == []
    new = f"{stamp(now + 30)} n6 kernel: NVRM: Xid (PCI:0000:3e:00): 74, pid=1, NVLink: fatal error"
    with log.open("a") as fh:
        fh.write(new + "\n")
    for _ in range(2):
        out = _cli(*args, "--state", str(state))
        assert out.returncode == 0, out.stderr
    assert [(s["kind"], s["evidence"]) for s in recorder.signals] == [("nvlink_error", new)]
    # --since: the lines logged at or after it
    out = _cli(*args, "--since", stamp(now - 7200).replace("+0000", "Z"))
    assert out.returncode == 0, out.stderr
    since = [s["evidence"] for s in recorder.signals[1:]]
    assert old in since and new in since and older not in since
    for bad in (("--since", "yesterday"), ("--state", str(log))):
        out = _cli(*args, *bad)
        assert out.returncode == 2 and bad[0] in out.stderr and "Traceback" not in out.stderr


def test_kernel_line_times():
    from unicron_plan.faults.xid import line_time

    at = calendar.timegm((2026, 12, 7, 4, 0, 0, 0, 0, 0))
    assert line_time("2026-12-07T04:00:00+0000 n6 kernel: NVRM: Xid") == at
    assert line_time("2026-12-07T05:00:00.250000+01:00 n6 kernel: NVRM: Xid") == at + 0.25
    assert line_time("2026-12-07T04:00:00Z n6 kernel: x") == at
    local = time.mktime((2026, 12, 7, 4, 0, 0, 0, 0, -1))
    assert line_time("Dec 07 04:00:00 n6 kernel: NVRM: Xid", now=at) == local
    assert line_time("Dec  7 04:00:00.5 n6 kernel: x", now=at) == local + 0.5
    assert line_time("Dec 31 23:00:00 n6 kernel: x", now=calendar.timegm((2027, 1, 1, 12, 0, 0, 0, 0, 0))) == \
        time.mktime((2026, 12, 31, 23, 0, 0, 0, 0, -1))  # last year's line read in January
    assert line_time("[Mon Dec  7 04:00:00 2026] NVRM: Xid") == local
    assert line_time("<4>[ 12.5] NVRM: Xid", boot=1000.0) == 1012.5
    assert line_time("[ 12.5] NVRM: Xid") is None and line_time("NVRM: Xid (PCI:0000:3b:00): 79") is None
    assert parse_kernel_line("Dec 07 04:00:00 n6 kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", now=at).time == local
