"""The plan view page: self-contained (nothing to load, no script), escaped, and showing
the figures, moves, MIG changes and unplaced reasons of the plan."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from api.view import render
from tests.view.test_scene import _plan, _request


class _Tags(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def test_the_page_loads_nothing() -> None:
    html = render(_request(), _plan())
    tags = _tags(html)
    names = {t for t, _ in tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "image", "use"}
    for tag, attrs in tags:
        for key in ("src", "href", "srcset", "xlink:href", "action"):
            assert key not in attrs, (tag, attrs)
        style = attrs.get("style") or ""
        assert "url(" not in style, (tag, style)
    # Fills may only point at the page's own patterns.
    assert set(re.findall(r"url\(([^)]*)\)", html)) == {"#unhealthy"}
    csp = next(a["content"] for t, a in tags if t == "meta" and a.get("http-equiv"))
    assert csp is not None and "default-src 'none'" in csp


def test_the_page_shows_what_the_plan_does() -> None:
    html = render(_request(), _plan())
    assert html.count('<g class="gpu">') == 7
    for text in ("feasible", "objective (throughput)", "20.000%", ">6<",
                 "Running jobs the plan disturbs (2)", "n1/1", "n1/2", "for i",
                 "3g.20gb@0 3g.20gb@4 &rarr; 2g.10gb@0 1g.5gb@2 1g.5gb@3 3g.20gb@4",
                 "preempted: 1, gang_too_large: 1", "8 &gt; 5", "Placed jobs (7)"):
        assert text in html, text


def test_names_are_escaped() -> None:
    request = _request()
    request.cluster.nodes[0].name = "n1<script>"
    plan = _plan()
    plan.explanation = ["<b>bold</b> & more"]
    html = render(request, plan)
    assert "<script>" not in html and "n1&lt;script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in html
