"""The live dashboard at /ui: one static page, its script modules and its stylesheet, all served by
the API (no build step, works offline).

The page holds no data. It asks for a token, keeps it in the tab's sessionStorage and reads the
/v1 routes with ``Authorization: Bearer``, so every figure it shows is authenticated and scoped as
any client's request. That is why /ui itself is open to all, like /docs and /openapi.json.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

UI_DIRECTORY = Path(__file__).resolve().parent / "static" / "ui"
UI_PATH = "/ui"
UI_STATIC = "/static/ui"

# The page runs only its own files and talks only to this API: no inline script, nothing from
# another host (a stolen-token script would need one of the two).
CONTENT_SECURITY_POLICY = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


def add_dashboard(app: FastAPI) -> None:
    """Serve the dashboard page at /ui and its assets under /static/ui."""
    app.mount(UI_STATIC, StaticFiles(directory=UI_DIRECTORY), name="dashboard-assets")

    @app.get(UI_PATH, include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(
            UI_DIRECTORY / "index.html",
            headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Cache-Control": "no-cache"},
        )
