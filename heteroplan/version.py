"""The package's version: written here once (``pyproject.toml`` reads it at build time)."""

__version__ = "0.1.0"
