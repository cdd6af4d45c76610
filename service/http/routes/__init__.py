"""The HTTP routes, one router per resource: models, tensors, diagnostics,
health (and metrics), and ui (the explorer and the API docs).

A route parses the request, calls the use case (`service.imports`) or the
store, and renders; it never touches a store path (`tests/test_layering.py`).
"""
