"""What-if sweeps: a grid of request edits, each variant labelled.

Two kinds of axes multiply into the grid:

- field axes, `--set policy.objective=throughput,fairness`: a dotted path into the request
  document (`jobs.0.weight`, `jobs.*.preemptible` for every element of a list) and the values
  to try, each parsed as JSON when possible, else kept as a string;
- one cluster axis: the request as given (unless `baseline=False`), then one variant per
  `--add-nodes FILE` (its nodes appended to the cluster), then one where every `--drain` node
  is marked unschedulable.

Variants edit the raw JSON document; the result is validated again as a PlanRequest by the
runner, so an edit that makes a request invalid is reported like any other bad input.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from models import Node

_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")
_NODES = TypeAdapter(list[Node])


class SweepError(ValueError):
    """A sweep argument that cannot be used (bad `--set` syntax, unreadable nodes file)."""


class EditError(ValueError):
    """An edit that cannot be applied to one request (missing path, unknown node)."""


@dataclass(frozen=True)
class FieldSet:
    """Set the value at a dotted path of the request document."""

    path: tuple[str, ...]
    value: object
    label: str


@dataclass(frozen=True)
class ClusterEdit:
    """Append nodes to the cluster and/or mark nodes unschedulable."""

    label: str
    add_nodes: tuple[dict[str, object], ...] = ()
    drain: tuple[str, ...] = ()


@dataclass(frozen=True)
class Variant:
    """One point of the grid: field sets and an optional cluster edit, with its label."""

    sets: tuple[FieldSet, ...] = ()
    edit: ClusterEdit | None = None
    label: str = field(default="")

    @property
    def is_base(self) -> bool:
        """True for the variant that leaves the request unchanged."""
        return not self.sets and self.edit is None


BASE = Variant()


def parse_value(token: str) -> object:
    """A `--set` value: JSON when it parses (`2`, `true`, `["a"]`), else the string itself."""
    try:
        return json.loads(token)
    except json.JSONDecodeError:
        return token


def split_values(text: str) -> list[str]:
    """Split on commas outside brackets, braces and double quotes: `1,[2,3]` -> `1`, `[2,3]`."""
    parts: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "[{":
            depth += 1
        elif not quoted and ch in "]}":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def label_part(text: str) -> str:
    """A label piece safe in a file name: unsafe characters become `-`."""
    return _LABEL_UNSAFE.sub("-", text)


def parse_set(spec: str) -> list[FieldSet]:
    """`policy.objective=throughput,fairness` -> one FieldSet per value (a grid axis)."""
    dotted, sep, values = spec.partition("=")
    dotted = dotted.strip()
    if not sep or not dotted or not values:
        raise SweepError(f"--set {spec!r}: expected FIELD=VALUE[,VALUE...]")
    path = tuple(dotted.split("."))
    if any(not p for p in path):
        raise SweepError(f"--set {spec!r}: empty segment in field path {dotted!r}")
    short = dotted.removeprefix("policy.")
    tokens = split_values(values)
    if any(not t for t in tokens):
        raise SweepError(f"--set {spec!r}: empty value")
    return [FieldSet(path, parse_value(t), label_part(f"{short}={t}")) for t in tokens]


def load_nodes(path: Path) -> ClusterEdit:
    """An `--add-nodes` file: a JSON list of Node objects, checked now (SweepError if bad)."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise SweepError(f"--add-nodes {path}: cannot read: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise SweepError(f"--add-nodes {path}: invalid JSON at line {e.lineno} "
                         f"column {e.colno}: {e.msg}") from e
    try:
        _NODES.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(root)"
        raise SweepError(f"--add-nodes {path}: {loc}: {first['msg']}") from e
    nodes = tuple(data) if isinstance(data, list) else ()
    stem = path.name.removesuffix(".json")
    return ClusterEdit(label=label_part(f"add={stem}"), add_nodes=nodes)


def build_variants(
    sets: Sequence[str] = (),
    add_nodes: Sequence[Path] = (),
    drain: Sequence[str] = (),
    *,
    baseline: bool = True,
) -> list[Variant]:
    """The grid: every combination of the `--set` axes and the cluster axis, labelled.

    Without any sweep option the grid is the single unlabelled base variant.
    """
    axes: list[list[FieldSet]] = [parse_set(s) for s in sets]
    drained = tuple(n for arg in drain for n in arg.split(",") if n)
    edits: list[ClusterEdit | None] = [load_nodes(p) for p in add_nodes]
    if drained:
        edits.append(ClusterEdit(label=label_part("drain=" + "+".join(drained)),
                                 drain=drained))
    if baseline or not edits:
        edits.insert(0, None)
    variants = []
    for combo in itertools.product(*axes):
        for edit in edits:
            parts = [s.label for s in combo] + ([edit.label] if edit else [])
            variants.append(Variant(tuple(combo), edit, ",".join(parts)))
    labels = [v.label for v in variants]
    dup = next((lab for lab in labels if labels.count(lab) > 1), None)
    if dup is not None:
        raise SweepError(f"two sweep variants share the label {dup!r}; use distinct values")
    return variants


def _set_path(doc: object, path: tuple[str, ...], value: object, where: str = "") -> None:
    head, rest = path[0], path[1:]
    here = f"{where}.{head}" if where else head
    if isinstance(doc, list):
        if head == "*":
            targets = range(len(doc))
        else:
            try:
                targets = range(int(head), int(head) + 1)
            except ValueError as e:
                raise EditError(f"{here}: expected a list index or '*'") from e
            if not -len(doc) <= targets.start < len(doc):
                raise EditError(f"{here}: index out of range (list of {len(doc)})")
        for i in targets:
            if rest:
                _set_path(doc[i], rest, copy.deepcopy(value), f"{where}.{i}" if where else str(i))
            else:
                doc[i] = copy.deepcopy(value)
        return
    if not isinstance(doc, dict):
        raise EditError(f"{here}: cannot set a field inside a {type(doc).__name__}")
    if not rest:
        doc[head] = copy.deepcopy(value)
        return
    if head not in doc or doc[head] is None:
        doc[head] = {}
    _set_path(doc[head], rest, value, here)


def _nodes_of(doc: dict[str, object]) -> list[object]:
    cluster = doc.get("cluster")
    nodes = cluster.get("nodes") if isinstance(cluster, dict) else None
    if not isinstance(nodes, list):
        raise EditError("cluster.nodes: missing or not a list, cannot edit the cluster")
    return nodes


def apply(document: object, variant: Variant) -> object:
    """A copy of `document` with the variant's edits (the base variant returns it unchanged).

    Raises EditError when an edit does not fit this request.
    """
    if variant.is_base:
        return document
    if not isinstance(document, dict):
        raise EditError("(root): a request must be a JSON object")
    doc = copy.deepcopy(document)
    for s in variant.sets:
        _set_path(doc, s.path, s.value)
    edit = variant.edit
    if edit is not None:
        nodes = _nodes_of(doc)
        for name in edit.drain:
            match = [n for n in nodes if isinstance(n, dict) and n.get("name") == name]
            if not match:
                raise EditError(f"--drain: no node named {name!r} in this cluster")
            for n in match:
                n["schedulable"] = False
        nodes.extend(copy.deepcopy(list(edit.add_nodes)))
    return doc
