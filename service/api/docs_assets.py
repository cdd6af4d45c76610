"""The API documentation pages, offline: Swagger UI at `/docs`, ReDoc at `/redoc`.

Owns `router` (included by `service.api.routes.ui`) and the asset paths. FastAPI's
own pages load their scripts from a CDN, which a service on an air-gapped
network cannot reach; so the app is built with `docs_url=None` and
`redoc_url=None`, and these routes serve the same pages (FastAPI's
`get_swagger_ui_html` and `get_redoc_html`, ReDoc without Google Fonts)
pointing at assets from the `fastapi-offline` package: Swagger UI's bundle and
stylesheet, ReDoc's standalone bundle and a favicon, at `/docs/assets/{name}`.
A Content-Security-Policy keeps every request of these pages on the service's
own origin.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from service.api.problems import ProblemError
from service.errors import bounded

ASSET_PREFIX = "/docs/assets"
# the fastapi-offline package's data folder: kept in step with Swagger UI 5 and ReDoc by its releases
ASSET_DIR = Path(str(files("fastapi_offline") / "static"))
ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
# Swagger UI's page has an inline script and inline styles; both pages draw
# icons from data: URLs; ReDoc starts its search worker from a blob: URL.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": DOCS_CSP, "Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


def _root(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


@router.api_route("/docs", methods=["GET", "HEAD"])
async def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{ASSET_PREFIX}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSET_PREFIX}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png",
        swagger_ui_parameters=request.app.swagger_ui_parameters,
    )
    page.headers.update(PAGE_HEADERS)
    return page


@router.api_route("/redoc", methods=["GET", "HEAD"])
async def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSET_PREFIX}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSET_PREFIX}/favicon.png",
        with_google_fonts=False,
    )
    page.headers.update(PAGE_HEADERS)
    return page


@router.api_route(ASSET_PREFIX + "/{name}", methods=["GET", "HEAD"])
async def docs_asset(name: str) -> FileResponse:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise ProblemError("not-found", f"no documentation asset {bounded(repr(name), 80)}")
    return FileResponse(ASSET_DIR / name, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})
