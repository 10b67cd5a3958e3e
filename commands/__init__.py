"""The `specquant` command line: a surface above `runtime` and `converters` (neither imports it). main.py
dispatches; each other module is one command (bench/ is one with its own modules); common.py holds what
several share."""
