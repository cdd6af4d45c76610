"""The HTTP routes, one router per resource: models, tensors, diagnostics, health (and metrics), ui (the explorer and the API docs)."""
