"""Inline SVG of the cluster: one drawing per topology domain, one row per node, one cell
per GPU.

A GPU the plan leaves as it is fills its cell with its jobs' colours. A GPU the plan
changes gets a dark frame (orange when its MIG layout changes) and two bands: the thin top
band is the GPU before the plan, the tall one after it. In the top band a red span is a
job the plan preempts and a blue span a job it moves away; in the tall band a green bar
under a span marks a job the plan starts and a blue bar one it moves in. MIG instances are
drawn at their memory slices, idle ones in light grey; shared GPUs are split by fraction.
Each cell's tooltip (`<title>`) lists its jobs before and after.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from html import escape

from api.view.scene import Domain, GpuCell, JobStatus, Mark, NodeRow, Segment

GAP = 3


@dataclass(frozen=True, slots=True)
class Geometry:
    """Cell sizes in pixels: small clusters get big cells with job names written in."""

    cell_w: float
    cell_h: float
    top: float  # height of the before band of a changed GPU
    bar: float  # height of the started / moved-in bar
    font: float  # size of job names written in spans, 0 = none
    label_w: float = 118  # width of the node names column

    @property
    def row_h(self) -> float:
        """Height of a node's row."""
        return self.cell_h + 5


#: (most GPUs in the cluster, geometry), smallest clusters first.
GEOMETRIES = (
    (8, Geometry(240, 80, 22, 6, 12)),
    (64, Geometry(76, 46, 13, 5, 10)),
    (256, Geometry(46, 32, 10, 4, 0)),
    (None, Geometry(28, 25, 8, 4, 0)),
)


def geometry_for(gpus: int, longest_name: int) -> Geometry:
    """The cell geometry for a cluster of `gpus` GPUs whose longest node name has
    `longest_name` characters (node names longer than 17 are shortened)."""
    geo = next(g for most, g in GEOMETRIES if most is None or gpus <= most)
    return replace(geo, label_w=12 + 6.7 * min(17, longest_name))

COLORS = {
    "started": "#1a9641",
    "moved": "#2166ac",
    "preempted": "#d7191c",
    "mig": "#f07c00",
    "changed": "#222222",
    "idle": "#e4e4e4",
    "free": "#ffffff",
    "frame": "#b8b8b8",
}

#: Fill of a span in the top band (the GPU before the plan), by what happens to it.
_BEFORE_FILL = {Mark.preempted: COLORS["preempted"], Mark.moved_out: COLORS["moved"]}
#: Bar under a span in the after band, by what happens to it.
_AFTER_BAR = {Mark.started: COLORS["started"], Mark.moved_in: COLORS["moved"]}


def job_color(job: str, index: int | None = None) -> str:
    """A pastel colour for a job: the `index`-th of a golden-angle sequence of hues (jobs
    next to each other in the request get far-apart hues), or a hash of the name."""
    h = zlib.crc32(job.encode())
    hue = (index * 137.508) % 360 if index is not None else h % 360
    return f"hsl({hue:.0f},{50 + (h >> 9) % 25}%,{66 + (h >> 17) % 12}%)"


def _label(seg: Segment, sx: float, sw: float, y: float, h: float, geo: Geometry) -> str:
    """The job's name (and the MIG profile when there is room) written in its span."""
    fits = int((sw - 4) / (geo.font * 0.62))
    lines = [seg.job] if seg.job is not None else []
    if "@" in seg.what and (not lines or h >= 2.4 * geo.font + 4):
        lines.append(seg.what.split("@")[0])
    if fits < 3 or h < geo.font + 2:
        return ""
    out = ""
    for k, text in enumerate(lines):
        text = text if len(text) <= fits else text[:max(1, fits - 1)] + "…"
        out += (f'<text x="{sx + 2:.1f}" y="{y + 2 + geo.font * (k + 0.85):.1f}" '
                f'class="seg" font-size="{geo.font}">{escape(text)}</text>')
    return out


def _segment(seg: Segment, x: float, y: float, h: float, band: str, geo: Geometry,
             colors: Mapping[str, str]) -> str:
    sx, sw = x + seg.x0 * geo.cell_w, max(0.8, (seg.x1 - seg.x0) * geo.cell_w)
    if seg.job is None:
        fill = COLORS["idle"]
    else:
        own = colors.get(seg.job) or job_color(seg.job)
        fill = _BEFORE_FILL.get(seg.mark, own) if band == "before" else own
    stroke = ' stroke="#555" stroke-width="0.6"' if "@" in seg.what else ""
    out = f'<rect x="{sx:.2f}" y="{y:.2f}" width="{sw:.2f}" height="{h:.2f}" fill="{fill}"' \
          f'{stroke}/>'
    bar = _AFTER_BAR.get(seg.mark) if band == "after" else None
    if bar is not None:
        out += (f'<rect x="{sx:.2f}" y="{y + h - geo.bar:.2f}" width="{sw:.2f}" '
                f'height="{geo.bar}" fill="{bar}"/>')
    if geo.font and band == "after":
        out += _label(seg, sx, sw, y, h - geo.bar, geo)
    return out


def _describe(segs: list[Segment]) -> str:
    parts = [f"{s.job or 'idle'} ({s.what}, {s.mark.replace('_', ' ')})"
             if s.what != "whole" or s.job is None else f"{s.job} ({s.mark.replace('_', ' ')})"
             for s in segs]
    return ", ".join(parts) or "free"


def _title(cell: GpuCell) -> str:
    head = f"{cell.node}/{cell.index} {cell.model}"
    if cell.mig_enabled:
        head += " MIG"
    if not cell.healthy:
        head += " (unhealthy)"
    lines = [head]
    if cell.changed:
        lines.append("before: " + _describe(cell.before))
    lines.append(("after: " if cell.changed else "") + _describe(cell.after))
    if cell.mig_changed:
        lines.append("MIG: " + " ".join(f"{i.profile}@{i.start}" for i in cell.layout_before)
                     + " -> " + " ".join(f"{i.profile}@{i.start}" for i in cell.layout_after))
    return escape("\n".join(lines))


def gpu_cell(cell: GpuCell, x: float, y: float, geo: Geometry,
             colors: Mapping[str, str]) -> str:
    """One GPU's cell with its top-left corner at (x, y)."""
    w, h, top = geo.cell_w, geo.cell_h, geo.top
    parts = [f'<g class="gpu"><title>{_title(cell)}</title>',
             f'<rect x="{x}" y="{y}" width="{w}" height="{h}" '
             f'fill="{COLORS["free"] if cell.healthy else "url(#unhealthy)"}"/>']
    if cell.mig_enabled:
        step = w / cell.memory_slices
        parts += [f'<line x1="{x + k * step:.2f}" y1="{y}" x2="{x + k * step:.2f}" '
                  f'y2="{y + h}" stroke="#e2e2e2" stroke-width="0.5"/>'
                  for k in range(1, cell.memory_slices)]
    if cell.changed:
        parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{top}" fill="#f0f0f0"/>')
        parts += [_segment(s, x, y, top, "before", geo, colors) for s in cell.before]
        parts.append(f'<line x1="{x}" y1="{y + top + 0.5}" x2="{x + w}" '
                     f'y2="{y + top + 0.5}" stroke="#fff" stroke-width="1"/>')
        parts += [_segment(s, x, y + top + 1, h - top - 1, "after", geo, colors)
                  for s in cell.after]
    else:
        parts += [_segment(s, x, y, h, "after", geo, colors) for s in cell.after]
    if cell.mig_changed:
        frame, width = COLORS["mig"], 2.2
    elif cell.changed:
        frame, width = COLORS["changed"], 1.6
    else:
        frame, width = COLORS["frame"], 0.8
    parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="none" '
                 f'stroke="{frame}" stroke-width="{width}"/></g>')
    return "".join(parts)


def _node_label(node: NodeRow, y: float, geo: Geometry) -> str:
    name = node.name if len(node.name) <= 17 else node.name[:8] + "…" + node.name[-8:]
    style = "" if node.schedulable else ' fill="#999" text-decoration="line-through"'
    title = escape(node.name + ("" if node.schedulable else " (cordoned)"))
    return (f'<text x="0" y="{y + geo.cell_h / 2 + 4:.1f}" class="node"{style}>'
            f'<title>{title}</title>{escape(name)}</text>')


def domain_svg(domain: Domain, geo: Geometry, colors: Mapping[str, str]) -> str:
    """The drawing of one topology domain: a row per node."""
    step = geo.cell_w + GAP
    width = geo.label_w + max((len(n.gpus) for n in domain.nodes), default=1) * step
    height = max(1, len(domain.nodes)) * geo.row_h
    rows = []
    for r, node in enumerate(domain.nodes):
        y = r * geo.row_h + 2
        rows.append(_node_label(node, y, geo))
        rows += [gpu_cell(c, geo.label_w + k * step, y, geo, colors)
                 for k, c in enumerate(node.gpus)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
            f'height="{height + 2:.0f}" '
            f'role="img" aria-label="{escape(domain.name)}">{"".join(rows)}</svg>')


def defs_svg() -> str:
    """Patterns shared by every drawing on the page (SVG ids are document-wide)."""
    return ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
            '<pattern id="unhealthy" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/>'
            '<line x1="0" y1="0" x2="0" y2="6" stroke="#888" stroke-width="2"/></pattern>'
            '</defs></svg>')


def _swatch(x: float, fill: str, text: str, stroke: str = "#b8b8b8", sw: float = 0.8,
            bar: str | None = None, band: str | None = None) -> str:
    out = (f'<rect x="{x}" y="3" width="22" height="16" fill="{fill}" stroke="{stroke}" '
           f'stroke-width="{sw}"/>')
    if band is not None:
        out += f'<rect x="{x}" y="3" width="22" height="5" fill="{band}"/>'
    if bar is not None:
        out += f'<rect x="{x}" y="15" width="22" height="4" fill="{bar}"/>'
    return out + f'<text x="{x + 27}" y="15" class="legend">{escape(text)}</text>'


def legend_svg() -> str:
    """The key to the cells' colours and marks."""
    items = [
        ("#9ecae1", "job (colour per job)", "#b8b8b8", 0.8, None, None, 150),
        ("#9ecae1", "started", COLORS["changed"], 1.6, COLORS["started"], None, 80),
        ("#9ecae1", "moved in", COLORS["changed"], 1.6, COLORS["moved"], None, 90),
        (COLORS["free"], "moved away (top band)", COLORS["changed"], 1.6, None,
         COLORS["moved"], 170),
        (COLORS["free"], "preempted (top band)", COLORS["changed"], 1.6, None,
         COLORS["preempted"], 165),
        (COLORS["idle"], "idle MIG instance", "#555", 0.6, None, None, 135),
        (COLORS["free"], "MIG layout changes", COLORS["mig"], 2.2, None, None, 150),
        ("url(#unhealthy)", "unhealthy", "#b8b8b8", 0.8, None, None, 90),
        (COLORS["free"], "free", "#b8b8b8", 0.8, None, None, 60),
    ]
    x = 2.0
    parts = []
    for fill, text, stroke, sw, bar, band, width in items:
        parts.append(_swatch(x, fill, text, stroke, sw, bar, band))
        x += width
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{x:.0f}" height="22" '
            f'role="img" aria-label="legend">{"".join(parts)}</svg>')


def status_color(status: JobStatus) -> str:
    """The mark colour of a job status (for the page's counts)."""
    return {JobStatus.started: COLORS["started"], JobStatus.migrated: COLORS["moved"],
            JobStatus.preempted: COLORS["preempted"]}.get(status, "#777")
