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
