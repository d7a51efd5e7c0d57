"""The spec chapters ship here as package data:
`importlib.resources.files("aotspec.specs") / "ops.md"`."""
