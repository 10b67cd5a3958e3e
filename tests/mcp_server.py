"""A small MCP server for tests/test_mcp_host.py, written with the SDK's server API (MCPServer, v1's FastMCP).

    python tests/mcp_server.py              # stdio
    python tests/mcp_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp
    python tests/mcp_server.py --stubborn   # stdio, but ignores SIGTERM and the end of its input
    python tests/mcp_server.py --garbage    # stdio, after two lines that are not JSON-RPC
    python tests/mcp_server.py --only add   # stdio, listing that one tool (tests/test_mcp_loop.py)

Its tools cover each fault the host must survive: `crash` ends the process mid-call, `hang` never answers,
`huge` answers ~1 MB, and `bad_schema` is listed with an input schema that is not a valid JSON schema (the SDK
builds schemas from signatures, so the tool is registered first and its schema replaced).
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def echo(text: str) -> str:
    """Return the text as it came."""
    return text


def crash() -> str:
    """End the server's process at once, mid-call."""
    os._exit(3)


async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return ""


def huge() -> str:
    """About 1 MB of text."""
    return "0123456789abcdef" * 65536


def bad_schema(x: int) -> int:
    """Listed with an invalid input schema."""
    return x


def server(only: str | None = None) -> MCPServer:
    """All the tools; with `only`, that one alone (so a model told to call a tool calls that one)."""
    if only is not None:
        mcp = MCPServer("specquant-test", log_level="WARNING")
        mcp.add_tool({f.__name__: f for f in (add, echo, crash, hang, huge)}[only])
        return mcp
    broken = Tool.from_function(bad_schema).model_copy(
        update={"parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}
    )
    mcp = MCPServer("specquant-test", tools=[broken], log_level="WARNING")
    for fn in (add, echo, crash, hang, huge):
        mcp.add_tool(fn)
    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--stubborn", action="store_true", help="ignore SIGTERM and the end of stdin")
    parser.add_argument("--api-key", help="ignored: a secret in the arguments, for the redaction test")
    parser.add_argument("--garbage", action="store_true", help="write lines that are not JSON-RPC first")
    parser.add_argument("--only", choices=("add", "echo", "crash", "hang", "huge"), help="list this tool alone")
    args = parser.parse_args()
    if args.garbage:  # before the SDK moves the channel off fd 1 (it keeps stray prints out of it)
        os.write(1, b'this is not JSON\n{"jsonrpc": "2.0", "id": "nobody", "oops": true}\n')
    if args.http:
        server(args.only).run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            server().run()
        finally:  # stdin closed: stay alive until killed
            while True:
                time.sleep(1)
    else:
        server(args.only).run()


if __name__ == "__main__":
    main()
