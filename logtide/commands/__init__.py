"""Subcommands of `logtide`. Each module defines register(subparsers) and sets a `func` default."""
