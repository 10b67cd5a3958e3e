"""SpecQuant runtime: model cache, inference and the command line. Never imports Qt."""

__version__ = "0.1.0"
