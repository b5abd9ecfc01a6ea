"""Manifests: read files, directories and stdin; parse YAML safely; validate against the schemas."""
