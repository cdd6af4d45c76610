"""The HTTP routes, one router per resource: models, tensors, health."""
