"""Untrusted text: echoing it safely (one line, bounded length) and telling whether it is Unicode text."""

from __future__ import annotations

MAX_ECHO = 400  # characters of one message line


def escape(text: str) -> str:
    """``text`` with every non-printable character (newline, tab, escape codes...) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def cut(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` shortened to about ``limit`` characters, keeping its start and its end."""
    if len(text) <= limit:
        return text
    tail = max(limit // 4, 1)
    head = max(limit - tail - 30, 1)
    return f"{text[:head]}...[{len(text) - head - tail} characters cut]...{text[-tail:]}"


def shown(value, limit: int = 60) -> str:
    """A value as it may appear in a message: escaped, then cut to ``limit`` characters."""
    return cut(escape(value if isinstance(value, str) else repr(value)), limit)


def one_line(message: str, limit: int = MAX_ECHO) -> str:
    """A whole message made safe for one line of stderr."""
    return cut(escape(message), limit)


def is_unicode(text: str) -> bool:
    """Whether ``text`` is Unicode text: no lone surrogate (a \\ud800-\\udfff code point not part of a
    pair, which a JSON escape can make and no UTF-8 output can write)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
