"""`/docs` (Swagger UI) and `/redoc` (ReDoc) served entirely by this server.

The JavaScript and CSS builds come from the `fastapi-offline` package (a dependency, not
copies in this repository) and are served under `/static/`. Both pages carry a
Content-Security-Policy that lets the browser load only from this server, so the docs
work on an air-gapped cluster and never reach the internet.

ReDoc's side-menu footer renders an `<img>` whose source is its vendor's CDN; a short
script in the page declines to set an image source on another origin, so the browser
never even tries that request (the footer link then shows its text only), and the policy
would refuse it anyway.
"""

from __future__ import annotations

import json
from html import escape
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: The Swagger UI and ReDoc builds shipped by `fastapi-offline`.
STATIC_DIR = str(files("fastapi_offline") / "static")
STATIC_URL = "/static"

#: Same-origin only; inline scripts and styles are the pages' own.
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
       "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:")

#: Runs before ReDoc: image sources on another origin are not set (ReDoc's footer logo).
_SAME_ORIGIN_IMAGES = """
(function () {
  var setAttribute = Element.prototype.setAttribute;
  function local(value) {
    try { return new URL(value, location.href).origin === location.origin; }
    catch (e) { return false; }
  }
  Element.prototype.setAttribute = function (name, value) {
    if (this instanceof HTMLImageElement && name === "src" && !local(String(value))) return;
    return setAttribute.call(this, name, value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    get: src.get,
    set: function (value) { if (local(String(value))) src.set.call(this, value); },
    configurable: true, enumerable: true
  });
})();
"""


def redoc_html(title: str, openapi_url: str) -> str:
    """The ReDoc page: local bundle, no web fonts, off-origin images declined."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><title>{escape(title)}</title><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="shortcut icon" href="{STATIC_URL}/favicon.png">
<style>body {{ margin: 0; padding: 0; }} img[alt="redocly logo"] {{ display: none; }}</style>
<script>{_SAME_ORIGIN_IMAGES}</script></head>
<body><noscript>ReDoc needs JavaScript.</noscript>
<redoc spec-url={json.dumps(openapi_url)}></redoc>
<script src="{STATIC_URL}/redoc.standalone.js"></script></body></html>
"""


def add_docs(app: FastAPI) -> None:
    """Mount the assets and add the `/docs` and `/redoc` pages to `app`."""
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        """Swagger UI with local assets."""
        page = get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_URL}/favicon.png",
        )
        page.headers["Content-Security-Policy"] = CSP
        return page

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        """ReDoc with local assets."""
        return HTMLResponse(redoc_html(f"{app.title} - ReDoc", openapi_url),
                            headers={"Content-Security-Policy": CSP})
