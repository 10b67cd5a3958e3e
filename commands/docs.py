"""`specquant docs`: collections of documents to search (#42): add, list, remove, sync and search."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, TextIO

from commands.common import embedding_model
from runtime.errors import UserError
from runtime.terminal_text import visible

if TYPE_CHECKING:  # loaded inside `main`: `specquant --help` must not open SQLite or load pypdf
    from runtime.documents.library import IndexProgress, Library

NAME = "docs"
HELP = "index documents in collections and search them"
_SHOWN_ERRORS = 20  # error lines after an add or sync; `docs list` has them all
VECTOR_SECONDS = 60.0  # an add or sync returns after this much vector work: the next one goes on (--wait)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = sub.add_parser("add", help="add files and folders to a collection and index them")
    add.add_argument("paths", nargs="+", metavar="PATH")
    add.add_argument("--collection", default="default", help="the collection (default: default)")
    add.add_argument("--wait", action="store_true",
                     help=f"compute every vector before returning (default: {VECTOR_SECONDS:g} s of them, the rest "
                          "by the next add or sync; everything is searchable by its words at once)")
    ls = sub.add_parser("list", help="the indexed files, their state and chunks")
    ls.add_argument("--collection", help="only this collection")
    ls.add_argument("--json", action="store_true", help="print a JSON list, one object per file")
    rm = sub.add_parser("remove", help="forget a file or folder, or a whole collection")
    rm.add_argument("path", nargs="?", metavar="PATH")
    rm.add_argument("--collection", help="the collection to remove (with PATH: remove PATH from it only)")
    sync = sub.add_parser("sync", help="index new and changed files again, forget deleted ones")
    sync.add_argument("--collection", help="only this collection")
    sync.add_argument("--wait", action="store_true", help="compute every vector before returning")
    find = sub.add_parser("search", help="the passages that match a query best (BM25 and embeddings)")
    find.add_argument("query")
    find.add_argument("--collection", help="only this collection")
    find.add_argument("--top", type=int, default=5, help="how many passages (default 5)")
    find.add_argument("--json", action="store_true", help="print a JSON list of hits")


BAR_WIDTH = 20


def progress_text(p: IndexProgress) -> str:
    """`[########------------]  40% 812/2000 files, 3,104 chunks  notes/a.md`: the bar is the share of bytes read
    (files when their sizes are unknown), since one large PDF takes longer than a hundred notes; in the vectors
    stage `vectors [####----]  20% 640/3,104 chunks  notes/a.md`, the share of chunks embedded."""
    from runtime.documents.library import VECTORS

    filled = round(p.share * BAR_WIDTH)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    if p.stage == VECTORS:
        return f"vectors [{bar}] {p.share:4.0%} {p.chunks_done:,}/{p.chunks_total:,} chunks  {visible(p.path)}"
    return f"[{bar}] {p.share:4.0%} {p.files_done}/{p.files_total} files, {p.chunks_done:,} chunks  {visible(p.path)}"


VECTORS_NOTE = ("searchable by words now; computing vectors of {n:,} chunks for search by meaning "
                "(Ctrl-C stops, and the next `specquant docs add` or `sync` goes on from there)")
LEFT_NOTE = ("note: vectors for {n:,} chunks are left for the next `specquant docs add` or `sync` (or the "
             "window's Documents tab, in the background); search uses their words meanwhile (--wait: all now)")
PROGRESS_LINE_S = 30.0  # off a terminal (a log): one progress line this often in the vectors stage


class ProgressLine:
    """One redrawn line on a terminal (files, chunks, the file at hand). When the vectors stage starts, one
    line says that search by words works already; off a terminal, that line and then a progress line every
    PROGRESS_LINE_S seconds while vectors are computed (the long part)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last_draw = 0.0
        self.drawn = False
        self.vectors_told = False

    def __call__(self, p: IndexProgress) -> None:
        from runtime.documents.library import VECTORS

        now = time.monotonic()
        if p.stage == VECTORS and not self.vectors_told and not p.finished:
            self.vectors_told, self.last_draw = True, now
            self.end()
            self.stream.write(VECTORS_NOTE.format(n=p.chunks_total - p.chunks_done) + "\n")
            self.stream.flush()
        if not self.tty:
            if p.stage == VECTORS and (now - self.last_draw >= PROGRESS_LINE_S or p.finished):
                self.last_draw = now
                self.stream.write(progress_text(p) + "\n")
                self.stream.flush()
            return
        if now - self.last_draw < 0.1 and not p.finished:
            return
        self.last_draw, self.drawn = now, True
        self.stream.write("\r" + progress_text(p)[:100].ljust(100))
        self.stream.flush()

    def end(self) -> None:
        if self.drawn:
            self.drawn = False
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def main(args: argparse.Namespace) -> int:
    """Everything printed that came from outside (file names, reasons, document text, collection names) goes
    through runtime.terminal_text.visible, so a name with a newline or an escape sequence shows as what it is;
    JSON is exact (json.dumps escapes control characters itself)."""
    try:
        return _run(args)
    except UserError as e:  # its message may quote a path or a collection name
        raise UserError(visible(str(e))) from None


def _run(args: argparse.Namespace) -> int:
    from runtime.documents.library import Library

    embedder = embedding_model() if args.action in ("add", "sync", "search") else None
    try:
        with Library(embedder=embedder) as lib:
            if args.action in ("add", "sync"):
                return _index(lib, args)
            if args.action == "list":
                return _list(lib, args)
            if args.action == "remove":
                n = lib.remove(args.path, args.collection)
                what = f"removed {n} file{'s' if n != 1 else ''}"
                print(what if args.path is not None else f"{what} and the collection {args.collection!r}")
                return 0
            return _search(lib, args)
    finally:
        if embedder is not None:
            embedder.close()


def _index(lib: Library, args: argparse.Namespace) -> int:
    from runtime.documents.outcome import outcome_line

    printer = ProgressLine(sys.stderr)
    try:
        seconds = None if args.wait else VECTOR_SECONDS
        if args.action == "add":
            result = lib.add(args.paths, args.collection, progress=printer, vector_seconds=seconds)
        else:
            result = lib.sync(args.collection, progress=printer, vector_seconds=seconds)
    finally:
        printer.end()
    print(outcome_line(result))
    if result.vectors_left:
        print(LEFT_NOTE.format(n=result.vectors_left), file=sys.stderr)
    if result.keyword_only:
        from runtime.documents.vectors import MAX_FILE_VECTORS

        for path in result.keyword_only[:_SHOWN_ERRORS]:
            print(f"  note: {visible(path)}: searchable by keyword only beyond its first {MAX_FILE_VECTORS:,} "
                  "distinct passages (one file's vector budget)", file=sys.stderr)
    for path, reason in result.errors[:_SHOWN_ERRORS]:
        print(f"  error: {visible(path)}: {visible(reason)}", file=sys.stderr)
    if len(result.errors) > _SHOWN_ERRORS:
        print(f"  ... {len(result.errors) - _SHOWN_ERRORS} more: see `specquant docs list`", file=sys.stderr)
    return 0


def _list(lib: Library, args: argparse.Namespace) -> int:
    files = lib.list_files(args.collection)
    if args.json:
        print(json.dumps([f.as_dict() for f in files], indent=2))
        return 0
    if not files:
        print("no documents yet; try `specquant docs add PATH`")
        return 0
    for f in files:
        what = f"{f.chunks} chunks" if f.state == "indexed" else f.state + (f": {f.error}" if f.error else "")
        what += f" ({f.note})" if f.note else ""
        print(f"[{visible(f.collection)}] {visible(f.path)}  {visible(what)}")
    return 0


def _search(lib: Library, args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise UserError("give something to search for")
    hits = lib.search(args.query, args.collection, args.top)
    if lib.embedder is not None:  # chunks a stopped add left, or embedded by another model: words alone
        with_vectors, chunks = lib.index.vector_coverage(lib.embedder.name)
        if with_vectors < chunks:
            print(f"note: {chunks - with_vectors:,} of {chunks:,} chunks have no vector of {lib.embedder.name} yet "
                  "and were searched by their words alone; `specquant docs sync` computes them", file=sys.stderr)
    if args.json:
        print(json.dumps([h.as_dict() for h in hits], indent=2))
        return 0
    if not hits:
        print("no matches")
    for i, h in enumerate(hits, 1):
        where = f" p. {h.page}" if h.page is not None else f":{h.lines[0]}-{h.lines[1]}" if h.lines else ""
        heading = f"  ({visible(h.heading)})" if h.heading else ""
        print(f"{i}. {visible(h.path)}{where}{heading}  score {h.score:.3g}")
        snippet = " ".join(h.text.split())
        print(f"   {visible(snippet[:300])}{'...' if len(snippet) > 300 else ''}")
    return 0
