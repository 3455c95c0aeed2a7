"""Stored answers to single-node failures as a delta on one shared body of job entries.

Every single-node failure of nodes in service leaves the same nodes in service, so the jobs a failure
does not change have the same plan entry in all of them (:func:`unicron_plan.plan.incremental.shared_entries`).
Their JSON is encoded once (:func:`encode_body`); an answer keeps only the text around the jobs
array and the entries of the jobs it changes (:func:`split_plan`). A reply is then the body with those
entries spliced in (:func:`joined_text`), or, for another node of the representative's class, with
the changed entries and the plan's own fields relabelled (:func:`relabelled_text`): the shared entries
name neither node (:func:`split_plan` refuses a plan where one could). Work per reply grows with the
changed jobs, not with the plan (but for one copy of the body's bytes).

An answer that shares no body (a failure that changes most jobs) is kept whole, compressed, with the
lengths of its parts (:class:`WholeAnswer`): a reply for another node of its class is its text split
there and relabelled as a delta whose every entry may change, only the entries that may name either
node read again, not the whole plan.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from array import array
from bisect import bisect_right
from collections import OrderedDict
from itertools import accumulate

JOBS = b'"jobs":[]'  # the jobs array of a plan's text without its jobs (once, outside any string)
#: Node indexes (:func:`_node_index`) kept, the most recently used.
INDEXES_KEPT = 4


def encode_body(entries: list) -> list[bytes]:
    """Each plan entry's JSON text, as the plan's own text has it."""
    return [pj.json_bytes() for pj in entries]


def split_plan(plan, shared: list, holders: dict, members: list[str], most: int | None = None) -> tuple | None:
    """(head, {position: changed entry's JSON} (a :class:`NamedChanges` naming ``members[0]``), tail) of
    ``plan`` whose other entries are ``shared``'s
    (the very objects), or None where that does not hold, where more than ``most`` entries change,
    or where a shared entry may name a node of ``members`` (a job listing one in its current
    allocation, by ``holders``: node -> job ids). A changed entry that the plans sharing ``shared``
    keep (its ``texts``: :class:`unicron_plan.plan.incremental._Body`) is encoded once for all of them."""
    if len(plan.jobs) != len(shared):
        return None
    changed = [k for k, (pj, s) in enumerate(zip(plan.jobs, shared)) if pj is not s]
    if most is not None and len(changed) > most:
        return None
    ids = {plan.jobs[k].id for k in changed}
    if any(jid not in ids for m in members for jid in holders.get(m, ())):
        return None
    texts = getattr(shared, "texts", None)  # the changed entries' texts, where the shared ones keep them
    ends = plan_ends(plan)
    if ends is None:
        return None
    entries = NamedChanges((k, _entry_text(plan.jobs[k], texts)) for k in changed)
    if members:
        entries.named = _named(entries, members[0])
    return ends[0], entries, ends[1]


def _named(changed: dict, node: str) -> "tuple[str, array] | None":
    """(``node``, the positions of ``changed``'s entries that name it or are a hit job's, as
    :func:`_flagged` finds them), or None where ``node`` is not a plain id (every entry is then read)."""
    return (node, array("i", _flagged(changed, (node,)))) if _PLAIN_ID.fullmatch(node) else None


class NamedChanges(dict):
    """An answer's changed entries (position -> JSON text) with ``named``: :func:`_named` of them, or
    None. Found once where the answer is made, for its representative, so that a reply for another node
    of the class searches the entries for that node alone (:func:`_rewritten`)."""

    named: "tuple[str, array] | None" = None


def plan_ends(plan) -> tuple[bytes, bytes] | None:
    """(head, tail): ``plan``'s JSON text around its jobs' entries, the text being head, the entries
    joined by commas, tail; None where the jobs array cannot be found once. Made from a copy without
    jobs that makes none of their placements (``Plan.__copy__`` makes every placement's models first;
    the entries reused from earlier plans need none)."""
    from pydantic import BaseModel

    top = BaseModel.__copy__(plan)
    top.__dict__["jobs"] = []
    private = top.__pydantic_private__
    if private and "_placements" in private:
        private["_placements"] = None
    text = top.model_dump_json(exclude_none=True).encode()
    if text.count(JOBS) != 1:
        return None
    at = text.index(JOBS) + len(JOBS) - 1
    return text[:at], text[at:]


def plan_text(plan) -> bytes:
    """``plan.model_dump_json(exclude_none=True)`` as bytes, its entries written by
    :func:`encode_body` (a placement held as arrays written from them, no model per (node, GPUs) made)."""
    ends = plan_ends(plan)
    if ends is None:
        return plan.model_dump_json(exclude_none=True).encode()
    return _framed(ends[0], encode_body(plan.jobs), ends[1])


class WholeAnswer:
    """A stored answer kept whole: its plan's JSON text compressed (``packed``); ``lengths``: the
    lengths of the text before its job entries, of each entry and of the text after them (the entries
    joined by commas), or None where the jobs array cannot be found once (the text is then read whole
    to relabel it); ``named``: as :class:`NamedChanges` has it, for the entries."""

    __slots__ = ("packed", "lengths", "named")

    def __init__(self, packed: bytes, lengths, named: "tuple[str, array] | None" = None):
        self.packed = packed
        self.lengths = lengths
        self.named = named

    def __reduce__(self):
        return (WholeAnswer, (self.packed, self.lengths, self.named))

    @classmethod
    def of(cls, plan, node: str | None = None) -> "WholeAnswer":
        """``plan``'s text (:func:`plan_text`, the plan's own JSON text) compressed, with its parts'
        lengths and the entries that name ``node`` (the failed node) or are a hit job's."""
        ends = plan_ends(plan)
        if ends is None:
            return cls(zlib.compress(plan.model_dump_json(exclude_none=True).encode(), 1), None)
        pieces = encode_body(plan.jobs)
        try:
            lengths = array("i", [len(ends[0]), *map(len, pieces), len(ends[1])])
        except OverflowError:  # (a part of 2 GiB or more: the text is then read whole)
            lengths = None
        named = None if node is None else _named(dict(enumerate(pieces)), node)
        return cls(zlib.compress(_framed(ends[0], pieces, ends[1]), 1), lengths, named)

    def text(self) -> bytes:
        """The plan's JSON text."""
        return zlib.decompress(self.packed)

    def reply(self, a: str, b: str, order: dict[str, int], end: bytes | None = None) -> bytes:
        """The text of the plan (``a``'s failure) made ``b``'s (:func:`relabelled_text`; as it is where
        ``b`` is ``a``); ``end``: as :func:`joined_text`'s. Where the lengths do not add up to the
        text, it is read whole and relabelled."""
        text = self.text()
        if a != b:
            parts = None if self.lengths is None else _split(text, self.lengths)
            if parts is not None:
                head, pieces, tail = parts
                every = StoredChanges(array("i", range(len(pieces))), tuple(pieces), self.named)
                return relabelled_text(pieces, head, every, tail, a, b, order, end)
            from unicron_plan.plan.contingency import relabel_plan

            text = json.dumps(relabel_plan(json.loads(text), a, b, order), separators=(",", ":"),
                              allow_nan=False).encode()
        return text if end is None else text[:-1] + end


def _split(text: bytes, lengths) -> tuple[bytes, list[bytes], bytes] | None:
    """(head, entries, tail) of ``text`` by ``lengths`` (:class:`WholeAnswer`), or None where they do
    not split it: their sum and the commas between the entries are not its length, an entry is not an
    object, or there is no entry."""
    n = len(lengths) - 2
    if n < 1 or sum(lengths) + n - 1 != len(text):
        return None
    at = lengths[0]
    pieces = []
    for size in lengths[1:-1]:
        piece = text[at:at + size]
        if piece[:1] != b"{" or piece[-1:] != b"}":
            return None
        pieces.append(piece)
        at += size + 1
    return text[:lengths[0]], pieces, text[at - 1:]


def _entry_text(entry, texts: dict | None) -> bytes:
    """``entry``'s JSON text, kept in ``texts`` (id -> [entry, its text or None]) where it is one of its
    entries (made for an earlier plan too: :class:`unicron_plan.plan.incremental._Made`)."""
    held = None if texts is None else texts.get(id(entry))
    if held is None or held[0] is not entry:
        return entry.json_bytes()
    if held[1] is None:
        held[1] = entry.json_bytes()
    return held[1]


class StoredChanges:
    """A stored answer's changed entries: their positions (a compact array) and their texts (a tuple),
    each text the one object every stored answer with the same text holds (:func:`stored_changes`)."""

    __slots__ = ("positions", "texts", "named")

    def __init__(self, positions, texts: tuple, named: "tuple[str, array] | None" = None):
        self.positions = positions
        self.texts = texts
        self.named = named  # as :class:`NamedChanges` has it

    def items(self):
        return zip(self.positions, self.texts)

    def __len__(self) -> int:
        return len(self.texts)


def stored_changes(changed: dict[int, bytes], texts: dict[bytes, bytes]) -> StoredChanges:
    """``changed`` (position -> entry text) as a service keeps it: the texts interned in ``texts`` (text
    -> the one copy kept), so that the many answers that change a job the same way hold its text once
    (answers to single-node failures of one cluster share most of their changed entries)."""
    positions = array("i", changed)
    return StoredChanges(positions, tuple(texts.setdefault(t, t) for t in changed.values()),
                         getattr(changed, "named", None))


def joined_text(body: list[bytes], head: bytes, changed, tail: bytes, end: bytes | None = None) -> bytes:
    """The plan's JSON text: the body with the changed entries (position -> text, or
    :class:`StoredChanges`) in place; with ``end``, the text's last byte (its closing brace) replaced
    by ``end``. One copy of the body's bytes (the ends are joined to the first and last entries before
    the join)."""
    pieces = list(body)
    for k, text in changed.items():
        pieces[k] = text
    if end is not None:
        tail = tail[:-1] + end
    return _framed(head, pieces, tail)


def _framed(head: bytes, pieces: list[bytes], tail: bytes) -> bytes:
    """``head + b",".join(pieces) + tail`` with the body's bytes copied once."""
    if not pieces:
        return head + tail
    pieces[0] = head + pieces[0]
    pieces[-1] = pieces[-1] + tail
    return b",".join(pieces)


#: node ids that JSON writes as they are (no escape): an entry naming one holds it quoted, byte for byte
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:@/+\-]+")
#: "hit" as a value (a hit job's reason, whose sentence may name nodes), not as the key of the hit
#: flag every entry has
_HIT_VALUE = re.compile(rb'"hit"(?!:)')


def _untouched(*names: str):
    """A test of an entry's text: True where renaming the nodes ``names`` (:func:`unicron_plan.plan.contingency.rename_plan`,
    :func:`~unicron_plan.plan.contingency.relabel_plan`) would leave the entry as it is (it names none of
    them and is no hit job's, whose sentence may name one), False where it may not; None (every entry
    read) where a node id is not plain."""
    if not all(_PLAIN_ID.fullmatch(n) for n in names):
        return None
    needles = tuple(b'"' + n.encode() + b'"' for n in names)
    return lambda text: not any(n in text for n in needles) and _HIT_VALUE.search(text) is None


def relabelled_text(body: list[bytes], head: bytes, changed, tail: bytes, a: str, b: str,
                    order: dict[str, int], end: bytes | None = None, indexed: bool = False) -> bytes:
    """The JSON text of :func:`unicron_plan.plan.contingency.relabel_plan` of the plan (``a``'s
    failure) made ``b``'s: only its own fields and the changed entries that may name a node are read
    and relabelled (the others are kept as they are: relabelling leaves them so); ``changed`` and
    ``end``: as :func:`joined_text`'s. ``indexed``: the entries that list a node are found from an
    index of ``changed`` (a :class:`StoredChanges` read again for many replies: :func:`_node_index`)."""
    from unicron_plan.plan.contingency import relabel_plan

    return _rewritten(body, head, changed, tail, (a, b), lambda plan: relabel_plan(plan, a, b, order), end,
                      indexed)


def renamed_text(body: list[bytes], head: bytes, changed, tail: bytes, rename: dict[str, str],
                 order: dict[str, int], end: bytes | None = None, indexed: bool = False) -> bytes | None:
    """The JSON text of :func:`unicron_plan.plan.contingency.rename_plan` of the plan, read as
    :func:`relabelled_text` reads it (the body's entries must name no node ``rename`` moves); None where
    an entry read is a hit job's (its sentence names nodes, which renaming does not rewrite)."""
    from unicron_plan.plan.contingency import rename_plan

    moved = {a: b for a, b in rename.items() if a != b}
    hits = []

    def renamed(plan: dict) -> dict:
        hits.extend(j for j in plan["jobs"] if j.get("reason") == "hit")
        return rename_plan(plan, moved, order)

    text = _rewritten(body, head, changed, tail, tuple(moved), renamed, end, indexed)
    return None if hits else text


def _rewritten(body: list[bytes], head: bytes, changed, tail: bytes, names: tuple, rewrite,
               end: bytes | None, indexed: bool = False) -> bytes:
    """The plan's text with its own fields and the changed entries that may name a node of ``names``
    (:func:`_untouched`; every one where it is None) read, given to ``rewrite`` (the plan's JSON form
    with those entries alone) and written again; the other entries kept as their bytes. ``indexed``:
    the entries are found from the node index of ``changed`` (:func:`_node_index`) where it has one;
    else those found for a node where the answer was made (``changed.named``) are taken as they are
    and the entries are searched for the other nodes alone."""
    untouched = _untouched(*names)
    pieces = list(body)
    for k, text in changed.items():
        pieces[k] = text
    positions = None
    if indexed and untouched is not None:
        found = _node_index(changed)
        if found is not None:
            index, hits = found
            positions = sorted({*hits, *(k for name in names for k in index.get(name.encode(), ()))})
    named = getattr(changed, "named", None)
    if positions is None and untouched is not None and named is not None and named[0] in names:
        needles = [b'"' + n.encode() + b'"' for n in names if n != named[0]]
        positions = sorted({*named[1], *(k for k, text in changed.items() if any(n in text for n in needles))})
    if positions is None:
        positions = [k for k, _ in changed.items()] if untouched is None else _flagged(changed, names)
    top = json.loads(head + tail)
    top["jobs"] = [json.loads(pieces[k]) for k in positions]
    rewrite(top)
    for k, job in zip(positions, top.pop("jobs")):
        pieces[k] = json.dumps(job, separators=(",", ":"), allow_nan=False).encode()
    rest = json.dumps(top, separators=(",", ":"), allow_nan=False).encode()
    tail = b"]" + (b"," + rest[1:] if len(rest) > 2 else b"}")
    if end is not None:
        tail = tail[:-1] + end
    return _framed(b'{"jobs":[', pieces, tail)


def _flagged(changed, names: tuple) -> list:
    """The positions of the changed entries :func:`_untouched` does not pass (that name a node of
    ``names``, plain ids, or are a hit job's), found by searching their texts joined once: one scan
    per node and one for a hit reason, in C, instead of four per entry."""
    positions = list(changed.keys()) if hasattr(changed, "keys") else changed.positions
    texts = list(changed.values()) if hasattr(changed, "values") else changed.texts
    blob = b"\n".join(texts)  # (no entry's compact JSON holds a raw newline)
    starts = list(accumulate((len(t) + 1 for t in texts), initial=0))
    found = {bisect_right(starts, m.start()) - 1 for m in _HIT_VALUE.finditer(blob)}
    for name in names:
        needle = b'"' + name.encode() + b'"'
        at = blob.find(needle)
        while at >= 0:
            found.add(bisect_right(starts, at) - 1)
            at = blob.find(needle, at + 1)
    return [positions[k] for k in sorted(found)]


#: an entry's nodes list, as the plan's JSON text has it
_NODES = re.compile(rb'"nodes":\[([^\]]*)\]')
_INDEXES: "OrderedDict[int, tuple]" = OrderedDict()  # id(changed) -> (changed, its index or None)
_INDEXES_LOCK = threading.Lock()


def _node_index(changed: "StoredChanges") -> tuple[dict[bytes, list[int]], list[int]] | None:
    """({node id's JSON text without quotes: positions of the changed entries whose nodes list names it},
    positions of the hit jobs' entries, read whatever the nodes: their sentences may name any) of
    ``changed``, made on first use and kept for the INDEXES_KEPT most recently used; None where another
    entry does not list its nodes exactly once (the entries are then searched, :func:`_flagged`)."""
    key = id(changed)
    with _INDEXES_LOCK:
        held = _INDEXES.get(key)
        if held is not None and held[0] is changed:
            _INDEXES.move_to_end(key)
            return held[1]
    index: dict[bytes, list[int]] = {}
    hits: list[int] = []
    found: tuple | None = (index, hits)
    for k, text in changed.items():
        if _HIT_VALUE.search(text) is not None:
            hits.append(k)
            continue
        lists = _NODES.findall(text)
        if len(lists) != 1:
            found = None
            break
        for token in lists[0].split(b","):
            if token:
                index.setdefault(token[1:-1], []).append(k)
    with _INDEXES_LOCK:
        _INDEXES[key] = (changed, found)
        _INDEXES.move_to_end(key)
        while len(_INDEXES) > INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return found
