"""The OpenAPI document: problems declared per route, and served under
`application/problem+json`.

Owns `problem_responses(*statuses)` (for a route's `responses=`) and
`openapi_with_problems(app)` (the generated document, with every 4xx/5xx
response moved to the problem media type, and the bearer scheme on every
route that takes credentials, so that Swagger UI's Authorize button works).
FastAPI gives a route one operationId for all its methods (and warns that
each GET and HEAD pair shares one): here each operation of such a route gets
its own, `<route's id without its method>_<method>`, and an id still shared
after that is logged as a warning.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.api.problems import PROBLEM_MEDIA_TYPE
from service.api.schemas import Problem

log = logging.getLogger("service")


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {status: {"model": Problem, "description": "a problem"} for status in statuses}
    responses["default"] = {"model": Problem, "description": "any other error, as a problem"}
    return responses


def one_id_per_operation(paths: dict[str, dict[str, Any]]) -> None:
    """Operations of one path sharing an operationId (a route with several
    methods) each get their own: the id without its method suffix, then theirs."""
    for item in paths.values():
        shared = Counter(operation.get("operationId") for operation in item.values())
        suffix = re.compile(rf"_(?:{'|'.join(map(re.escape, item))})$")
        for method, operation in item.items():
            operation_id = operation.get("operationId")
            if operation_id is not None and shared[operation_id] > 1:
                operation["operationId"] = f"{suffix.sub('', operation_id)}_{method}"
    every = Counter(operation.get("operationId") for item in paths.values() for operation in item.values())
    duplicates = sorted(str(operation_id) for operation_id, count in every.items() if count > 1)
    if duplicates:
        log.warning("the OpenAPI document has duplicate operation ids: %s", ", ".join(duplicates))


def openapi_with_problems(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        with warnings.catch_warnings():  # the ids shared by a route's methods are made unique below
            warnings.filterwarnings("ignore", message="Duplicate Operation ID", category=UserWarning)
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        one_id_per_operation(schema.get("paths", {}))
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
