"""The plan view page: header figures, the cluster drawing, what moves, MIG changes and
the unplaced jobs, as one self-contained HTML document.

The page loads nothing: styles are inline, drawings are inline SVG, there is no script,
and its Content-Security-Policy (`default-src 'none'`) makes the browser refuse any
request the page might still make.
"""

from __future__ import annotations

from collections import Counter
from html import escape

from api.view.scene import Domain, JobStatus, Scene, build_scene
from api.view.svg import (
    defs_svg,
    domain_svg,
    geometry_for,
    job_color,
    legend_svg,
    status_color,
)
from models import Instance, Plan, PlanRequest

#: Tables longer than this start folded (a `<details>` the reader opens).
FOLD_ROWS = 30

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px 20px;color:#222}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:22px 0 8px}
h3{font-size:13px;margin:0 0 4px;font-weight:600}
.figs{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.fig{border:1px solid #ddd;border-radius:6px;padding:4px 10px;background:#fafafa}
.fig b{display:block;font-size:16px}.fig>span{font-size:11px;color:#666}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600}
.domains{display:flex;flex-wrap:wrap;gap:14px 16px;align-items:flex-start}
.domain{border:1px solid #e3e3e3;border-radius:6px;padding:6px 8px;width:min-content}
.domain p{margin:0 0 4px;font-size:11px;color:#555}
text.node{font:11px ui-monospace,monospace;fill:#333}text.seg{font-family:sans-serif;fill:#111}
text.legend{font:12px sans-serif;fill:#333}
table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #eee;padding:2px 10px 2px 0;text-align:left;vertical-align:top}
th{color:#555;font-weight:600}code{font-size:12px}
.chip{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.warn{color:#a40000}summary{cursor:pointer;color:#333}
"""

_STATUS_BADGE = {"optimal": "#1a9641", "feasible": "#2166ac", "heuristic": "#666",
                 "infeasible": "#d7191c"}


def _num(x: float | None, fmt: str = ".6g") -> str:
    return "–" if x is None else format(x, fmt)


def _fig(value: str, label: str) -> str:
    return f'<div class="fig"><b>{value}</b><span>{escape(label)}</span></div>'


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _header(request: PlanRequest, plan: Plan, scene: Scene) -> str:
    gpus = sum(len(n.gpus) for n in request.cluster.nodes)
    used = sum(c.used_after for d in scene.domains for c in d.cells())
    badge = _STATUS_BADGE.get(plan.status, "#666")
    figs = [
        _fig(f'<span class="badge" style="background:{badge}">{escape(plan.status)}</span>',
             f"status ({plan.solver})"),
        _fig(_num(plan.objective_value), f"objective ({request.policy.objective})"),
        _fig(_num(plan.best_bound), "bound"),
        _fig(_num(plan.gap, ".3%") if plan.gap is not None else "–", "gap"),
        _fig(f"{plan.solve_time_s:.2f} s", "solve time"),
        _fig(f"{used:.4g} / {gpus}", "GPUs in use after"),
        _fig(f"{used / gpus:.1%}" if gpus else "–", "of the cluster"),
    ]
    counts = [_fig(f'<span class="chip" style="background:{status_color(s)}"></span>'
                   f"{scene.count(s)}", s.value) for s in JobStatus]
    counts.append(_fig(str(len(scene.mig_rows)), "MIG reconfigurations"))
    nodes = len(request.cluster.nodes)
    return (f"<h1>gpuplan plan: {_n(len(request.jobs), 'job')} on {_n(gpus, 'GPU')}, "
            f"{_n(nodes, 'node')}, {_n(len(scene.domains), 'topology domain')}</h1>"
            f'<div class="figs">{"".join(figs)}</div><div class="figs">{"".join(counts)}</div>')


def _domain_note(domain: Domain, scene: Scene) -> str:
    cells = list(domain.cells())
    used = sum(c.used_after for c in cells)
    changed = sum(c.changed for c in cells)
    jobs = {s.job for c in cells for s in c.after if s.job is not None}
    started = sum(scene.status.get(j) == JobStatus.started for j in jobs)
    return (f"{_n(len(domain.nodes), 'node')} · {_n(len(cells), 'GPU')} · {used:.4g} in use "
            f"after · {changed} changing · {started} started here")


def _cluster(scene: Scene) -> str:
    nodes = [n for d in scene.domains for n in d.nodes]
    geo = geometry_for(sum(len(n.gpus) for n in nodes),
                       max((len(n.name) for n in nodes), default=1))
    blocks = [f'<div class="domain"><h3>{escape(d.name)}</h3><p>{_domain_note(d, scene)}</p>'
              f"{domain_svg(d, geo, scene.colors)}</div>" for d in scene.domains]
    return (f"<h2>Cluster</h2>{defs_svg()}<div>{legend_svg()}</div>"
            "<p>Cells with a frame change: thin top band = before the plan, tall band = "
            "after. Hover a cell for its jobs.</p>"
            f'<div class="domains">{"".join(blocks)}</div>')


def _table(title: str, head: list[str], rows: list[list[str]], empty: str) -> str:
    """An HTML table (cells already escaped), folded when long."""
    if not rows:
        return f"<h2>{escape(title)}</h2><p>{escape(empty)}</p>"
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    table = f"<table><tr>{th}</tr>{body}</table>"
    if len(rows) > FOLD_ROWS:
        table = f"<details><summary>show all {len(rows)}</summary>{table}</details>"
    return f"<h2>{escape(title)} ({len(rows)})</h2>{table}"


def _job(scene: Scene, name: str) -> str:
    color = scene.colors.get(name) or job_color(name)
    return f'<span class="chip" style="background:{color}"></span>{escape(name)}'


def _places(places: tuple[str, ...]) -> str:
    return escape(", ".join(places)) if places else "<i>stopped</i>"


def _moves(scene: Scene) -> str:
    rows = [[_job(scene, m.job),
             f'<b style="color:{status_color(m.status)}">{m.status.value}</b>',
             _places(m.before), _places(m.after), escape(m.detail)] for m in scene.moves]
    return _table("Running jobs the plan disturbs", ["job", "what", "from", "to", "detail"],
                  rows, "No running job is moved or preempted.")


def _layout(instances: tuple[Instance, ...]) -> str:
    return escape(" ".join(f"{i.profile}@{i.start}" for i in instances)) or "<i>empty</i>"


def _mig(scene: Scene) -> str:
    rows = [[escape(f"{r.node}/{r.gpu}"), escape(r.model),
             f"{_layout(r.before)} &rarr; {_layout(r.after)}", _layout(r.destroy),
             _layout(r.create), escape(", ".join(r.touches)) or "–"] for r in scene.mig_rows]
    return _table("MIG reconfigurations (before → after)",
                  ["GPU", "model", "layout", "destroy", "create", "running jobs touched"],
                  rows, "No MIG layout changes.")


def _placed(scene: Scene) -> str:
    rows = [[_job(scene, job), f'<b style="color:{status_color(s)}">{s.value}</b>',
             escape(", ".join(places))]
            for job, (s, places) in scene.placed.items()]
    return _table("Placed jobs", ["job", "status", "where"], rows, "No job is placed.")


def _unplaced(scene: Scene) -> str:
    counts = Counter(reason for _, reason, _ in scene.unplaced)
    summary = ", ".join(f"{escape(r)}: {n}" for r, n in counts.most_common())
    rows = [[_job(scene, j), f"<code>{escape(r)}</code>", escape(d)]
            for j, r, d in scene.unplaced]
    out = _table("Unplaced jobs", ["job", "reason", "detail"], rows, "Every job is placed.")
    return out.replace("</h2>", f"</h2><p>{summary}</p>", 1) if rows else out


def _notes(plan: Plan, scene: Scene) -> str:
    out = ""
    if scene.warnings:
        items = "".join(f"<li>{escape(w)}</li>" for w in scene.warnings)
        out += f'<h2 class="warn">Plan and request disagree</h2><ul class="warn">{items}</ul>'
    if plan.explanation:
        items = "".join(f"<li>{escape(e)}</li>" for e in plan.explanation)
        out += f"<h2>Notes</h2><ul>{items}</ul>"
    return out


def render(request: PlanRequest, plan: Plan) -> str:
    """The plan view of `plan` (answering `request`) as a self-contained HTML page."""
    scene = build_scene(request, plan)
    scene.colors = {j.name: job_color(j.name, i) for i, j in enumerate(request.jobs)}
    body = (_header(request, plan, scene) + _cluster(scene) + _moves(scene) + _mig(scene)
            + _unplaced(scene) + _placed(scene) + _notes(plan, scene))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>gpuplan plan ({escape(plan.status)})</title><style>{_STYLE}</style>"
            f"</head><body>{body}</body></html>\n")
