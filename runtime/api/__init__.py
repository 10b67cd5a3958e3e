"""`specquant serve`: the OpenAI-compatible local API (the server, its request and response shapes, and
what keeps web pages out)."""
