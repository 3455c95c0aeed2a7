import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests never fail on time: no per-example deadline, and no health check that times the
# generation of examples (a loaded machine is slow, not wrong). A test's own settings add to these.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

ROOT = Path(__file__).resolve().parents[1]
#: seconds a test waits for the service's warm index: its worker runs at the lowest CPU priority and
#: gets only the CPU nothing else wants, so on a loaded machine a small build can take minutes
WARM_WAIT = 300
sys.path.insert(0, str(Path(__file__).parent))  # tests/randgen.py


@pytest.fixture
def tiny_instance() -> dict:
    """The worked example of docs/format.md as a dict (fresh copy per test)."""
    return json.loads((ROOT / "instances" / "tiny-one-job-two-nodes.json").read_text())


def library_instances() -> list[Path]:
    """Every instance file of the library."""
    return sorted((ROOT / "instances").glob("*.json"))


@pytest.fixture(params=["scan", "simdjson"])
def array_reader(request, monkeypatch) -> str:
    """The reader of compact tables as arrays under test: the compiled scan (``io._tablescan``; under
    CI=true it must be built), or simdjson, which reads them where the scan is not built."""
    import os

    from unicron_plan import io

    if request.param == "scan":
        if io._tablescan is None:
            if os.environ.get("CI") == "true":
                pytest.fail("the compiled table scan (unicron_plan._tablescan) is not built")
            pytest.skip("the compiled table scan is not built")
    else:
        if io._simdjson is None:
            pytest.skip("simdjson is not installed")
        monkeypatch.setattr(io, "_tablescan", None)
    return request.param


def without_array_reader(monkeypatch) -> None:
    """Compact tables read as lists, as the plain reader reads them (neither array reader)."""
    from unicron_plan import io

    monkeypatch.setattr(io, "_tablescan", None)
    monkeypatch.setattr(io, "_simdjson", None)
