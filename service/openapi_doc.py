"""The OpenAPI document: problems declared per route, and served under
`application/problem+json`.

Owns `problem_responses(*statuses)` (for a route's `responses=`) and
`openapi_with_problems(app)` (the generated document, with every 4xx/5xx
response moved to the problem media type, and the bearer scheme on every
route that takes credentials, so that Swagger UI's Authorize button works).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.models import Problem
from service.problems import PROBLEM_MEDIA_TYPE


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {status: {"model": Problem, "description": "a problem"} for status in statuses}
    responses["default"] = {"model": Problem, "description": "any other error, as a problem"}
    return responses


def openapi_with_problems(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "an API key's secret (when the service has --api-keys)"}
        }
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                if "401" in operation.get("responses", {}):  # the routes that take credentials
                    operation["security"] = [{"bearer": []}]
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if (status == "default" or status.startswith(("4", "5"))) and "application/json" in content:
                        content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")
        app.openapi_schema = schema
    return app.openapi_schema
