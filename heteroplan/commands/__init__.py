"""Subcommands of the heteroplan CLI, one module each with register(subparsers)."""
