"""A small MCP server for tests/test_mcp_host.py, written with the SDK's server API (MCPServer, v1's FastMCP).

    python tests/mcp_server.py              # stdio
    python tests/mcp_server.py --http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp
    python tests/mcp_server.py --stubborn   # stdio, but ignores SIGTERM and the end of its input
    python tests/mcp_server.py --garbage    # stdio, after two lines that are not JSON-RPC
    python tests/mcp_server.py --only add   # stdio, listing that one tool (tests/test_mcp_loop.py)
    python tests/mcp_server.py --hostile-tools     # stdio, also listing tools no chat can be offered
    python tests/mcp_server.py --many-tools N      # stdio, also listing N copies of `echo` (t0, t1, ...)
    python tests/mcp_server.py --grandchild FILE   # stdio, after starting a sleeping child (its pid in FILE)
    python tests/mcp_server.py --grandchild FILE --setsid  # ... a child that leaves the group, its parent gone
    python tests/mcp_server.py --proxy [ARGS...]   # the server run with ARGS behind a relay that spoils its output

The relay (tests/test_hostile_mcp.py) passes the server's stdout on line by line, and before a line holding
`INJECT-BAD-BYTES` writes a line that is not UTF-8; at one holding `INJECT-FLOOD` it writes 17 MiB without a
newline instead, and then nothing more.

Its tools cover each fault the host must survive: `crash` ends the process mid-call, `hang` never answers,
`huge` answers ~1 MB, and `bad_schema` is listed with an input schema that is not a valid JSON schema (the SDK
builds schemas from signatures, so the tool is registered first and its schema replaced).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
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


def hostile_tools() -> list[Tool]:
    """Tools that cannot be offered to a model: a schema nested 100 levels deep, a 1 MB description, 6,000
    properties (each built on `echo`, its schema or description replaced)."""
    deep: dict[str, object] = {"type": "string"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"x": deep}}
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(6000)}}
    base = Tool.from_function(echo)
    return [
        base.model_copy(update={"name": "deep", "parameters": {"type": "object", "properties": {"x": deep}}}),
        base.model_copy(update={"name": "wordy", "description": "Echo. " + "blah " * 200_000}),
        base.model_copy(update={"name": "wide", "parameters": wide}),
    ]


def server(only: str | None = None, hostile: bool = False, many: int = 0) -> MCPServer:
    """All the tools; with `only`, that one alone (so a model told to call a tool calls that one); `hostile`
    adds hostile_tools(), `many` that many copies of `echo`."""
    if only is not None:
        mcp = MCPServer("specquant-test", log_level="WARNING")
        mcp.add_tool({f.__name__: f for f in (add, echo, crash, hang, huge)}[only])
        return mcp
    broken = Tool.from_function(bad_schema).model_copy(
        update={"parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}
    )
    base = Tool.from_function(echo)
    copies = [base.model_copy(update={"name": f"t{i}"}) for i in range(many)]
    mcp = MCPServer("specquant-test", tools=[broken, *(hostile_tools() if hostile else []), *copies],
                    log_level="WARNING")
    for fn in (add, echo, crash, hang, huge):
        mcp.add_tool(fn)
    return mcp


def relay(args: list[str]) -> None:
    """Run this server with `args` as a child and pass its output on, spoiled where a line asks for it."""
    child = subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def down() -> None:
        for line in sys.stdin.buffer:
            child.stdin.write(line)  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
        child.stdin.close()  # type: ignore[union-attr]

    threading.Thread(target=down, daemon=True).start()
    out = sys.stdout.buffer
    for line in child.stdout:
        if b"INJECT-BAD-BYTES" in line:
            out.write(b"\xff\xfe not UTF-8 \xc3\x28 \x80\n")
        if b"INJECT-FLOOD" in line:
            out.write(b"x" * (17 << 20))
            out.flush()
            time.sleep(3600)
        out.write(line)
        out.flush()
    sys.exit(child.wait())


def main() -> None:
    if sys.argv[1:2] == ["--proxy"]:
        relay(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--stubborn", action="store_true", help="ignore SIGTERM and the end of stdin")
    parser.add_argument("--api-key", help="ignored: a secret in the arguments, for the redaction test")
    parser.add_argument("--garbage", action="store_true", help="write lines that are not JSON-RPC first")
    parser.add_argument("--only", choices=("add", "echo", "crash", "hang", "huge"), help="list this tool alone")
    parser.add_argument("--hostile-tools", action="store_true", help="also list tools no chat can be offered")
    parser.add_argument("--setsid", action="store_true",
                        help="with --grandchild: the sleeper calls setsid() and is orphaned (PPID 1)")
    parser.add_argument("--many-tools", type=int, default=0, metavar="N", help="also list N copies of echo")
    parser.add_argument("--grandchild", metavar="FILE", help="start a sleeping child first; its pid goes to FILE")
    args = parser.parse_args()
    if args.grandchild and args.setsid:  # a daemon's double fork: out of the group, and init's child
        # start_new_session: setsid() runs between fork and exec, so it has happened when Popen returns and the
        # pid is written (a setsid() in the sleeper's own code raced the test's check on a busy machine).
        code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
                "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True); "
                "open(sys.argv[1], 'w').write(str(p.pid))")
        subprocess.run([sys.executable, "-c", code, args.grandchild], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, check=True)
    elif args.grandchild:  # outlives this server unless the host ends the server's whole process group
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        with open(args.grandchild, "w") as f:
            f.write(str(child.pid))
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
        server(args.only, args.hostile_tools, args.many_tools).run()


if __name__ == "__main__":
    main()
