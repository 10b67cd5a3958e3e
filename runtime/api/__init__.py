"""`specquant serve`: the OpenAI-compatible local API (the server, its request and response shapes, and
what keeps web pages out)."""

DEFAULT_PORT = 8088  # `specquant serve` and the window's local API server
