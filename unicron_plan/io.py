"""Strict JSON in, canonical JSON out, atomic writes.

Python's json module accepts NaN, Infinity and duplicate keys; a planner fed a
typo must not, so :func:`read_json` refuses all three with a message that
names the file and the place.
"""

from __future__ import annotations

import json
import os
import sys
import re
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from unicron_plan.errors import InvalidInstanceError


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a finite number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


MAX_DEPTH = 64  # nesting of arrays and objects; every document of the format needs fewer than 10
MAX_BYTES = 512 * 1024 * 1024  # a larger input file is refused before it is read


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string (unrolled: linear, no backtracking)
_NOT_BRACKETS = bytes(c for c in range(256) if chr(c) not in "[]{}")


def _too_deep(text: str) -> bool:
    """Whether ``text`` nests arrays and objects deeper than MAX_DEPTH (brackets inside strings
    ignored); linear time in C loops, so no parser ever recurses deeply."""
    import numpy as np

    brackets = _STRING.sub("", text).encode("utf-8", "replace").translate(None, _NOT_BRACKETS)
    codes = np.frombuffer(brackets, dtype=np.uint8)
    return bool(len(codes)) and int(np.cumsum(np.where((codes == 91) | (codes == 123), 1, -1)).max()) > MAX_DEPTH


def parse_json(text: str, source: str = "<input>") -> Any:
    """Parse JSON text, refusing NaN, infinities, duplicate keys and nesting deeper than MAX_DEPTH."""
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(text):  # cheap count first
        raise InvalidInstanceError(source, f"JSON nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise InvalidInstanceError(source, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:  # pragma: no cover - the depth test above comes first
        raise InvalidInstanceError(source, "JSON nested too deeply") from None
    except ValueError as exc:
        raise InvalidInstanceError(source, f"invalid JSON: {exc}") from None


def read_json(path: str | os.PathLike) -> Any:
    """Read and strictly parse a JSON file; a missing or unreadable file is bad input."""
    p = Path(path)
    try:
        if p.is_dir():
            raise InvalidInstanceError(str(p), "is a directory, not a JSON file")
        if p.is_file() and p.stat().st_size > MAX_BYTES:
            raise InvalidInstanceError(str(p), f"larger than {MAX_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInstanceError(str(p), "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInstanceError(str(p), f"cannot read: {exc}") from None
    return parse_json(text, str(p))


def field_path(loc: tuple) -> str:
    """('jobs', 3, 'weight') -> 'jobs[3].weight'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


# Fields holding a pydantic discriminated union on `kind` (their tag is not part of the path).
_TAGGED_UNION_FIELDS = frozenset({"event"})


def validation_error_to_invalid(exc: ValidationError, prefix: str = "") -> InvalidInstanceError:
    """Turn pydantic's first error into one clear message naming the field and the value."""
    err = exc.errors(include_url=False)[0]
    # Drop the union/function tags pydantic inserts into paths (e.g. 'function-after[...]').
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and p.endswith("]")))
    # Discriminated unions (the event kinds) insert the tag after the field: drop it.
    loc = tuple(p for k, p in enumerate(loc) if not (k and loc[k - 1] in _TAGGED_UNION_FIELDS))
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        loc = loc + ("kind",)
    path = field_path(loc)
    if not loc and err["type"] == "model_type":
        return InvalidInstanceError(prefix or "(top level)", "must be a JSON object")
    if prefix:
        path = f"{prefix}.{path}" if path != "(top level)" else prefix
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        # Model-level validators name sub-fields themselves, e.g. "failed_gpus[2]: ...".
        if ": " in msg and msg.split(": ", 1)[0].replace("[", "").replace("]", "").replace("_", "").replace(".", "").isalnum():
            sub, msg = msg.split(": ", 1)
            path = f"{path}.{sub}" if path != "(top level)" else sub
    if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
        value = err["input"]
        if not isinstance(value, (dict, list)):
            shown = repr(value)
            msg = f"{shown if len(shown) <= 60 else shown[:57] + '...'}: {msg}"
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check its spelling against `unicron-plan schema`)"
    return InvalidInstanceError(path, msg)


def parse_model(model: type[BaseModel], data: Any, prefix: str = "") -> Any:
    """Validate ``data`` against a pydantic model, raising InvalidInstanceError on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_invalid(exc, prefix) from None


def dumps(obj: Any) -> str:
    """Canonical JSON text: sorted keys, two-space indent, trailing newline."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json", exclude_none=True)
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` if it may be written; InvalidInstanceError (exit 2) when it is a directory, lies
    under a file, or is a block device or socket. A FIFO or character device (``/dev/stdout``)
    is written into, never replaced (see :func:`write_atomic`)."""
    import stat

    p = Path(path)
    where = str(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise InvalidInstanceError(where, "a parent of this path is a file, not a directory") from None
    except OSError as exc:
        raise InvalidInstanceError(where, f"cannot write: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInstanceError(where, "is a directory; name a file to write")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise InvalidInstanceError(where, "is a block device or socket; name a regular file")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise InvalidInstanceError(where, f"{parent} is a file, not a directory")
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write text to path through a temporary file and a rename, so readers never see half a file.

    The file gets the mode a plain ``open(path, "w")`` would give (0666 minus the umask), not the
    0600 of temporary files. A FIFO or character device is written into directly. Bad paths
    (see :func:`check_output_path`) are bad input (exit 2).
    """
    p = check_output_path(path)
    if p.exists() and not p.is_file():  # a FIFO or character device: write into it, keep it
        try:
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_figure_atomic(fig, path: str | os.PathLike, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG through a temporary file and a rename."""
    p = check_output_path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".png")
    except OSError as exc:
        raise InvalidInstanceError(str(p), f"cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=dpi)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def emit(text: str, out: "str | os.PathLike | None") -> None:
    """Print ``text`` to stdout, or write it atomically to ``out``."""
    if out is None:
        sys.stdout.write(text)
    else:
        write_atomic(out, text)
