"""A string holding a lone surrogate (an unpaired \\ud800-\\udfff escape) is bad input, refused by the
reader naming its field, on every path (small and large JSON, YAML, the CLI): before, a rack name
holding one passed the models and failed the writer (an internal error)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unicron_plan.errors import InvalidInstanceError
from unicron_plan.io import LARGE_TEXT_BYTES, parse_json, parse_yaml

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "instances" / "tiny-one-job-two-nodes.json"


@pytest.mark.parametrize("text, value", [
    ('{"a": "\\ud83d\\ude00"}', {"a": "\U0001F600"}),  # a pair is one character
    ('{"\\ud83d\\ude00": [1, "\\u00e9"]}', {"\U0001F600": [1, "\u00e9"]}),
    ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, then text
])
def test_text_with_pairs_or_no_surrogate_is_read(text, value):
    assert parse_json(text) == value


@pytest.mark.parametrize("text, where", [
    ('{"a": "\\ud800"}', "a:"),
    ('{"a": ["x", {"b": "z\\udc00"}]}', "a[1].b:"),
    ('[1, 2, "\\ud83d"]', "[2]:"),  # a high half alone
    ('["\\ude00\\ud83d"]', "[0]:"),  # the halves in the wrong order
    ('{"k\\ud800": 1}', "(key"),
    ('"\\udfff"', "(top level):"),
])
def test_a_lone_surrogate_is_refused_naming_its_field(text, where):
    with pytest.raises(InvalidInstanceError) as exc:
        parse_json(text)
    assert where in str(exc.value) and "lone surrogate" in str(exc.value)


def test_a_large_text_is_checked_too():
    doc = {"pad": ["x" * 64] * (LARGE_TEXT_BYTES // 64), "deep": {"list": ["ok", "bad\ud800"]}}
    text = json.dumps(doc)  # ASCII escapes
    assert len(text) >= LARGE_TEXT_BYTES
    with pytest.raises(InvalidInstanceError, match=r"deep\.list\[1\]: a string holds a lone surrogate"):
        parse_json(text.encode())
    del doc["deep"]
    assert parse_json(json.dumps(doc).encode()) == doc


def test_yaml_is_checked_too():
    with pytest.raises(InvalidInstanceError):
        parse_yaml('a: "\\ud800"')
    assert parse_yaml('a: "\\U0001F600"') == {"a": "\U0001F600"}


@pytest.mark.parametrize("command", [["solve"], ["contingency", "--out", "{tmp}/index"]])
def test_the_cli_answers_exit_2_naming_the_field(tmp_path, command):
    doc = json.loads(TINY.read_text())
    doc["cluster"]["nodes"][0]["rack"] = "r\ud800"
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(doc))
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    r = subprocess.run([sys.executable, "-m", "unicron_plan.cli", args[0], str(path), *args[1:]],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "cluster.nodes[0].rack: a string holds a lone surrogate" in r.stderr
    assert "Traceback" not in r.stderr
