"""What a bundled binary asks of the system that loads it, read from its headers with the standard library:
the libraries it links (ELF DT_NEEDED, PE imports, Mach-O LC_LOAD_DYLIB), where it looks for them (RUNPATH,
LC_RPATH) and, for Mach-O and PE, the oldest system it says it runs on.

Read here rather than with readelf, dumpbin or otool so that the contents check (installer.contents) runs
the same on every system, and its tests can feed it hand-made headers on Linux.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Binary:
    kind: str  # "elf", "pe" or "macho"
    needed: tuple[str, ...] = ()  # as the file names them: libgomp.so.1, KERNEL32.dll, @rpath/libggml-base.dylib
    rpaths: tuple[str, ...] = ()  # ELF RUNPATH/RPATH entries, Mach-O LC_RPATH
    min_os: tuple[int, ...] | None = None  # Mach-O minos (14, 0); PE subsystem version (10, 0)
    install_name: str | None = None  # Mach-O LC_ID_DYLIB


def read(path: Path) -> Binary | None:
    """The binary's facts, or None when `path` is no ELF, PE or Mach-O file (or is cut short)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        if data[:4] == b"\x7fELF":
            return _elf(data)
        if data[:2] == b"MZ":
            return _pe(data)
        return _macho(data)
    except (struct.error, IndexError, ValueError):
        return None


def _cstr(data: bytes, offset: int) -> str:
    end = data.index(b"\x00", offset)
    return data[offset:end].decode("utf-8", "replace")


# --- ELF (64-bit, little-endian: what x86-64 and arm64 Linux run) -----------------------------------------------

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 1, 5, 15, 29


def _elf(data: bytes) -> Binary | None:
    if data[4] != 2 or data[5] != 1:  # ELFCLASS64, little-endian
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_filesz, p_offset))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return Binary("elf")
    entries = []
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    if strtab is None:
        return Binary("elf")
    base = next((o + strtab - v for v, size, o in loads if v <= strtab < v + size), strtab)
    needed = tuple(_cstr(data, base + v) for t, v in entries if t == _DT_NEEDED)
    rpaths = tuple(p for t, v in entries if t in (_DT_RPATH, _DT_RUNPATH) for p in _cstr(data, base + v).split(":"))
    return Binary("elf", needed, rpaths)


# --- PE (Windows .exe, .dll, .pyd) ------------------------------------------------------------------------------


def _pe(data: bytes) -> Binary | None:
    pe, = struct.unpack_from("<I", data, 0x3C)
    if data[pe:pe + 4] != b"PE\x00\x00":
        return None
    n_sections, = struct.unpack_from("<H", data, pe + 6)
    opt_size, = struct.unpack_from("<H", data, pe + 20)
    opt = pe + 24
    magic, = struct.unpack_from("<H", data, opt)
    subsystem_version = struct.unpack_from("<HH", data, opt + 48)
    directories = opt + (112 if magic == 0x20B else 96)  # PE32+ or PE32
    import_rva, _ = struct.unpack_from("<II", data, directories + 8)  # directory 1: imports
    sections = []
    for i in range(n_sections):
        v_size, v_addr, raw_size, raw_ptr = struct.unpack_from("<IIII", data, opt + opt_size + i * 40 + 8)
        sections.append((v_addr, max(v_size, raw_size), raw_ptr))

    def offset(rva: int) -> int:
        for v_addr, size, raw in sections:
            if v_addr <= rva < v_addr + size:
                return raw + rva - v_addr
        raise ValueError(f"RVA {rva:#x} is in no section")

    needed = []
    if import_rva:
        at = offset(import_rva)
        while True:
            name_rva = struct.unpack_from("<5I", data, at)[3]
            if not name_rva:
                break
            needed.append(_cstr(data, offset(name_rva)))
            at += 20
    return Binary("pe", tuple(needed), min_os=tuple(subsystem_version))


# --- Mach-O (thin or fat) -----------------------------------------------------------------------------------

_LC_ID_DYLIB, _LC_VERSION_MIN_MACOSX, _LC_BUILD_VERSION = 0xD, 0x24, 0x32
_LC_LOAD = {0xC, 0x80000018, 0x8000001F, 0x80000023}  # load, weak, re-export, upward
_LC_RPATH = 0x8000001C


def _macho(data: bytes) -> Binary | None:
    if data[:4] == b"\xca\xfe\xba\xbe":  # fat: the slices' facts together, the newest minos
        count, = struct.unpack_from(">I", data, 4)
        if not 0 < count < 16:  # the same magic starts a Java class file
            return None
        slices = [_macho(data[o:o + s]) for _, _, o, s, _ in (struct.unpack_from(">5I", data, 8 + 20 * i)
                                                                for i in range(count))]
        found = [s for s in slices if s is not None]
        if not found:
            return None
        mins = [s.min_os for s in found if s.min_os]
        return Binary("macho", tuple(dict.fromkeys(n for s in found for n in s.needed)),
                      tuple(dict.fromkeys(r for s in found for r in s.rpaths)), max(mins) if mins else None,
                      found[0].install_name)
    if data[:4] not in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe"):
        return None
    header = 32 if data[0] == 0xCF else 28
    ncmds, = struct.unpack_from("<I", data, 16)
    needed, rpaths, min_os, name = [], [], None, None
    at = header
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, at)
        if cmd in _LC_LOAD or cmd == _LC_ID_DYLIB:
            text = _cstr(data, at + struct.unpack_from("<I", data, at + 8)[0])
            if cmd == _LC_ID_DYLIB:
                name = text
            else:
                needed.append(text)
        elif cmd == _LC_RPATH:
            rpaths.append(_cstr(data, at + struct.unpack_from("<I", data, at + 8)[0]))
        elif cmd == _LC_BUILD_VERSION:
            min_os = _version(struct.unpack_from("<I", data, at + 12)[0])
        elif cmd == _LC_VERSION_MIN_MACOSX and min_os is None:
            min_os = _version(struct.unpack_from("<I", data, at + 8)[0])
        at += size
    return Binary("macho", tuple(needed), tuple(rpaths), min_os, name)


def _version(packed: int) -> tuple[int, int]:
    """Mach-O's xxxx.yy.zz nibbles, as (major, minor)."""
    return packed >> 16, (packed >> 8) & 0xFF
