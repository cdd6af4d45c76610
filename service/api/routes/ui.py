"""The explorer (a static page at `/`, its files at `/ui/{name}`) and the
offline API documentation (`/docs`, `/redoc`, `/docs/assets/{name}`, from
`service.api.docs_assets`).

Owns `router`. Everything is served from the package folder `service/ui/`
(HTML, JavaScript, CSS and the vendored layout library with its licence), so
the page works without internet: no CDN, no external fonts. Only files listed
at import time are served (no path is ever joined from the request), with a
Content-Security-Policy that keeps every request of the page on the
service's own origin. None of these routes is in the OpenAPI document, and
none needs credentials: the page itself sends the API key the user enters
(`Authorization: Bearer`) with each API request.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from service.api import docs_assets
from service.api.problems import ProblemError
from service.errors import bounded

UI_DIR = Path(__file__).resolve().parents[2] / "ui"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
# The explorer's policy: scripts, workers, styles and requests from this origin
# only; images also from data: and blob: URLs (histograms, downloads).
EXPLORER_CSP = (
    "default-src 'self'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": EXPLORER_CSP, "Cache-Control": "no-cache", "Referrer-Policy": "no-referrer"}
ASSET_HEADERS = {"Content-Security-Policy": EXPLORER_CSP, "Cache-Control": "no-cache"}


def list_assets(folder: Path) -> dict[str, Path]:
    """Every servable file under `folder`, by its relative POSIX path."""
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.suffix in MEDIA_TYPES and not path.name.startswith(".")
    }


ASSETS = list_assets(UI_DIR)

router = APIRouter(include_in_schema=False)
router.include_router(docs_assets.router)


@router.api_route("/", methods=["GET", "HEAD"])
async def explorer() -> FileResponse:
    return FileResponse(UI_DIR / "index.html", media_type=MEDIA_TYPES[".html"], headers=PAGE_HEADERS)


@router.api_route("/ui/{name:path}", methods=["GET", "HEAD"])
async def explorer_asset(name: str) -> FileResponse:
    path = ASSETS.get(name)
    if path is None:
        raise ProblemError("not-found", f"no explorer file {bounded(repr(name), 80)}")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=ASSET_HEADERS)
