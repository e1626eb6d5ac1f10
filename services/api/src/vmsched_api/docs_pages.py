"""The API's documentation pages, with every asset served by the API itself (they work offline):
Swagger UI at /docs (files of the swagger-ui-bundle-v2 package) and the AsyncAPI viewer at
/asyncapi (files vendored in static/asyncapi), with /asyncapi.json and /asyncapi.yaml.

FastStream's own AsyncAPI pages are not used: they load their scripts from CDNs, and add
``POST /asyncapi/try``, which would let anyone who reaches the API publish any message to any
queue. Open to all, like /openapi.json: they describe the API, they hold nothing of its data.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from faststream.specification.base import SpecificationFactory
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

STATIC = Path(__file__).resolve().parent / "static"
SWAGGER_STATIC = "/static/swagger-ui"
ASYNCAPI_STATIC = "/static/asyncapi"

_ASYNCAPI_CONFIG = {
    "show": {
        "sidebar": True,
        "info": True,
        "servers": True,
        "operations": True,
        "messages": True,
        "schemas": True,
        "errors": True,
    },
    "expand": {"messageExamples": True},
    "sidebar": {"showServers": "byDefault", "showOperations": "byDefault"},
}


def asyncapi_html(title: str, document: str) -> str:
    """The AsyncAPI viewer page for a document (JSON), with this API's own script and styles."""
    # "</" cannot end the script element early: JSON allows it escaped.
    standalone = json.dumps({"schema": document, "config": _ASYNCAPI_CONFIG}).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html>
  <head>
    <meta charset="utf-8">
    <title>{title} AsyncAPI</title>
    <link rel="stylesheet" href="{ASYNCAPI_STATIC}/default.min.css">
  </head>
  <body>
    <div id="asyncapi"></div>
    <script src="{ASYNCAPI_STATIC}/standalone.js"></script>
    <script>
      window.AsyncApiStandalone.render({standalone}, document.getElementById("asyncapi"));
    </script>
  </body>
</html>
"""


def add_documentation(app: FastAPI, events: SpecificationFactory) -> None:
    """Serve /docs (OpenAPI), /asyncapi, /asyncapi.json, /asyncapi.yaml and their assets."""
    app.mount(SWAGGER_STATIC, StaticFiles(directory=swagger_ui_path), name="swagger-ui")
    app.mount(ASYNCAPI_STATIC, StaticFiles(directory=STATIC / "asyncapi"), name="asyncapi-viewer")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{SWAGGER_STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{SWAGGER_STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{SWAGGER_STATIC}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    @app.get("/asyncapi", include_in_schema=False)
    async def asyncapi_page() -> HTMLResponse:
        specification = events.to_specification()
        return HTMLResponse(asyncapi_html(app.title, specification.to_json()))

    @app.get("/asyncapi.json", include_in_schema=False)
    async def asyncapi_json() -> Response:
        return Response(json.dumps(events.to_specification().to_jsonable(), indent=2), media_type="application/json")

    @app.get("/asyncapi.yaml", include_in_schema=False)
    async def asyncapi_yaml() -> Response:
        return Response(events.to_specification().to_yaml(), media_type="application/yaml")
