"""Several warm workers: the classes split among processes forked by the first, every class stored once
with the answer one worker gives, body numbers that never collide, and every worker stopped with the
first (a request, a new upload, close)."""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import WARM_WAIT
from unicron_plan.schema import Instance
from unicron_plan.service import coordinator, state as st
from unicron_plan.service.answers import joined_text
from unicron_plan.service.coordinator import Coordinator
from unicron_plan.tools.generate import generate_instance
from test_service_warm import _alive, _base, _wait_answers

linux_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc (Linux)")


def _text(packed, bodies: dict) -> dict:
    """A stored answer as its plan, without its wall time (the one field two solves may differ in)."""
    text = joined_text(bodies[packed[0]], *packed[1:]) if isinstance(packed, tuple) else packed.text()
    plan = json.loads(text)
    plan["solver"].pop("wall_seconds")
    return plan


@pytest.mark.parametrize("kind,seed,n", [("equal-per-gpu", 1, 2), ("equal-per-gpu", 2, 3), ("linear-step", 3, 4),
                                         ("synthetic", 4, 2), ("identical", 5, 5)])
def test_shares_of_the_classes_are_the_whole_warm_up(kind, seed, n):
    """The messages of worker k of n, for every k, are those of one worker: each class once, with the
    same plan (the same delta where one worker sends a delta), and no two workers number a body alike."""
    inst = generate_instance(seed, gpus=1024, jobs=12, failed_nodes=0, curves=kind)
    inst.pop("event", None)
    snapshot = st.State(base=Instance.model_validate(inst), revision=1, base_version=1)
    one = list(coordinator._warm_messages(snapshot, None, 4096, lambda: False))
    bodies_one = {m[1]: m[2] for m in one if m[0] == "shared"}
    want = {m[1]: (m[2], _text(m[3], bodies_one), isinstance(m[3], tuple)) for m in one if m[0] == "answer"}
    assert want
    got, numbers, index = {}, [], None
    for k in range(n):
        messages = list(coordinator._warm_messages(snapshot, None, 4096, lambda: False, share=(k, n)))
        assert messages[0][0] == "index"
        if index is None:
            index = messages[0]
        assert messages[0][3] == one[0][3]  # every worker counts every node to do
        bodies = {m[1]: m[2] for m in messages if m[0] == "shared"}
        assert all(number % n == k for number in bodies)  # worker k's numbers: k, k + n, ...
        numbers += list(bodies)
        for m in messages[1:]:
            if m[0] == "answer":
                assert m[1] not in got, f"class of {m[1]} answered twice"
                got[m[1]] = (m[2], _text(m[3], bodies), isinstance(m[3], tuple))
    assert len(numbers) == len(set(numbers))
    assert got == want


def _stored(coord: Coordinator) -> tuple[dict, dict]:
    """(node -> representative, representative -> its plan) of the stored answers."""
    with coord._cv:
        answers = coord._answers
    return dict(answers[1]), {rep: _text(packed, answers[4]) for rep, packed in answers[2].items()}


def test_n_workers_store_every_class_once_with_the_answers_of_one(tmp_path, monkeypatch):
    inst = generate_instance(7, gpus=2048, jobs=16, failed_nodes=0, curves="equal-per-gpu")
    inst.pop("event", None)
    stored = {}
    for n in (1, 3):
        published = []
        real = Coordinator._publish

        def counted(self, snapshot, message, start, published=published, real=real):
            if message[0] == "answer":
                published.append(message[1])
            return real(self, snapshot, message, start)

        monkeypatch.setattr(Coordinator, "_publish", counted)
        coord = Coordinator(tmp_path / f"s{n}", warm_workers=n)
        try:
            coord.put_cluster(inst)
            assert coord.wait_contingency(WARM_WAIT)
            _wait_answers(coord)
            assert len(published) == len(set(published))  # each class stored once
            stored[n] = _stored(coord)
            if n > 1:
                assert len(set(coord.warm_pids)) == n  # the first and the n - 1 it forked
        finally:
            coord.close()
        monkeypatch.undo()
    assert stored[3] == stored[1]
    assert len(stored[1][0]) == len(inst["cluster"]["nodes"])


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0]


def _until(condition, bound: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``bound`` seconds pass (a hang guard, not a measurement)."""
    deadline = time.monotonic() + bound
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def _stopped_on_fork(monkeypatch, tmp_path, n: int):
    """A coordinator warming a cluster whose n workers are all stopped as a request would stop them, from
    the moment the first announces the others (so that none can finish first); (coordinator, pids,
    the pause to leave)."""
    import threading

    forked = threading.Event()
    pause = []
    real = Coordinator._publish

    def hooked(self, snapshot, message, start):
        real(self, snapshot, message, start)
        if message[0] == "workers" and not pause:
            pause.append(self._worker_paused())
            pause[0].__enter__()
            forked.set()

    monkeypatch.setattr(Coordinator, "_publish", hooked)
    coord = Coordinator(tmp_path / "s", warm_workers=n)
    inst = generate_instance(1, gpus=32768, jobs=256, failed_nodes=0, curves="identical")
    inst.pop("event", None)
    coord.put_cluster(inst)
    assert forked.wait(120)
    pids = list(coord.warm_pids[-n:])
    assert len(set(pids)) == n and pids[0] == coord._warm_pid
    return coord, pids, pause[0]


@linux_proc
def test_a_request_stops_every_worker(tmp_path, monkeypatch):
    coord, pids, pause = _stopped_on_fork(monkeypatch, tmp_path, 3)
    try:
        assert all(os.getpriority(os.PRIO_PROCESS, p) == coordinator.WARM_NICENESS for p in pids)  # the lowest
        assert _until(lambda: all(_state(p) == "T" for p in pids)), [_state(p) for p in pids]
        pause.__exit__(None, None, None)  # the request is done: every worker continues
        assert _until(lambda: all(not _alive(p) or _state(p) != "T" for p in pids))
        _wait_answers(coord)
    finally:
        coord.close()


@linux_proc
@pytest.mark.parametrize("how", ["upload", "close"])
def test_a_new_upload_or_close_stops_every_worker(tmp_path, monkeypatch, how):
    coord, pids, pause = _stopped_on_fork(monkeypatch, tmp_path, 3)
    try:
        assert all(_alive(p) for p in pids)  # stopped: none can have finished
        if how == "upload":
            small = _base("paper-128-a800.json")
            coord.put_cluster(small)
        else:
            coord.close()
        assert _until(lambda: not any(_alive(p) for p in pids), 20), "a worker of the old cluster still runs"
        pause.__exit__(None, None, None)
        if how == "upload":
            assert coord.wait_contingency(WARM_WAIT)
            _wait_answers(coord)
            assert coord.precomputed_status()["total"] == len(small["cluster"]["nodes"])
    finally:
        coord.close()


def test_the_number_of_workers_is_checked(tmp_path):
    from unicron_plan.errors import InvalidInstanceError

    for bad in (0, coordinator.MAX_WARM_WORKERS + 1):
        with pytest.raises(InvalidInstanceError):
            Coordinator(tmp_path / "s", warm_workers=bad, contingency=False)
    assert 1 <= coordinator.default_warm_workers() <= max(1, len(os.sched_getaffinity(0)))


def test_fewer_workers_where_memory_is_short():
    gib = 1 << 30
    copies = coordinator.affordable_copies
    assert copies(7, gib // 4, 64 * gib) == 7  # a small cluster: every CPU
    assert copies(63, 2 * gib, 512 * gib) == 2  # 2 GiB each: 3 in all within WARM_MEMORY_BYTES (6 GiB)
    assert copies(7, gib, 4 * gib) == 2  # half of 4 GiB available
    assert copies(7, 8 * gib, 64 * gib) == 0  # larger than the budget alone: the first works alone
    assert copies(0, 1, 64 * gib) == 0


@linux_proc
def test_messages_wait_while_the_workers_are_stopped(tmp_path):
    """The thread that receives the workers' messages does not run while a request has them stopped
    (it would take turns of the interpreter lock from the request), and goes on when they continue."""
    import subprocess
    import threading

    coord = Coordinator(tmp_path / "s", contingency=False)
    stand_in = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a worker that does nothing
    try:
        coord._warm_pid = stand_in.pid
        snapshot = coord.state
        pause = coord._worker_paused()
        pause.__enter__()
        assert _until(lambda: _state(stand_in.pid) == "T")
        waiter = threading.Thread(target=coord._wait_continued, args=(snapshot,), daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # waits while the worker is stopped
        pause.__exit__(None, None, None)
        waiter.join(10)
        assert not waiter.is_alive()
        assert _until(lambda: _state(stand_in.pid) != "T")
        coord._wait_continued(snapshot)  # nothing stopped: returns at once
    finally:
        coord._warm_pid = None
        stand_in.kill()
        stand_in.wait()
        coord.close()
