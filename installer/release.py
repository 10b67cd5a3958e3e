"""The release workflow's logic; .github/workflows/release.yml only calls it.

    python -m installer.release check-tag v0.1.0           the tag names pyproject.toml's version
    python -m installer.release collect TARGET --out dist --into upload
                                                           a build job's file (and self-test record) to upload
    python -m installer.release publish DIR --tag v0.1.0   SHA256SUMS, the notes, and `gh release create`

Which file each system's job publishes, and under what name, is decided here (TARGETS, release_file); the
README's download table is tested against it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from installer.artefact import human, sha256
from installer.metadata import Meta, read_meta, this_arch
from runtime.errors import UserError, run_command

REPO = Path(__file__).resolve().parents[1]
NAME = "SpecQuant"
SUMS = "SHA256SUMS"
RECORD = ".selftest.json"  # beside each file in a job's upload: where it was built and what its self-test ran


@dataclass(frozen=True)
class Target:
    os: str  # linux, windows, macos: the name build_installer.py gives the system
    arch: str  # x86_64, arm64, aarch64: as installer.metadata.this_arch() says it on that runner
    runner: str  # the GitHub-hosted runner that builds and self-tests it
    suffix: str  # what follows the base name in the file build_installer.py makes
    system: str  # as the README's download table names it: the floor below, in words
    # The oldest system the file runs on, which its job checks (installer.contents): the glibc version every
    # library may need at most (Linux), the macOS version every Mach-O file's minos may name at most, the
    # Windows build the setup refuses to install below (10.0.18362 is 10 version 1903).
    floor: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.os}-{self.arch}"


# Linux on Ubuntu 22.04's glibc 2.35, the oldest GitHub still hosts: the bundle then runs on Ubuntu 22.04 and
# later, Debian 12, Fedora 36 and later, Mint 21, Arch (docs/installers.md). A manylinux container's older
# glibc would reach further, but its Pythons have no shared libpython, which PyInstaller needs.
# ARM Linux on Ubuntu 24.04's glibc 2.39: PySide6's aarch64 wheels (manylinux_2_39) need it, whatever the runner.
# macOS on macos-15 (the macos-14 images were retired on 2 November 2026) and macos-15-intel (the last Intel
# image, supported until August 2027); the floor stays macOS 14 through MACOSX_DEPLOYMENT_TARGET.
TARGETS = {
    t.key: t
    for t in (
        Target("linux", "x86_64", "ubuntu-22.04", ".tar.gz", "Linux with glibc 2.35 or later, x86-64", (2, 35)),
        Target("linux", "aarch64", "ubuntu-24.04-arm", ".tar.gz", "Linux with glibc 2.39 or later, ARM64 (aarch64)",
               (2, 39)),
        Target("windows", "x86_64", "windows-2022", "-setup.exe", "Windows 10 (1903 or later) or 11, x86-64",
               (10, 0, 18362)),
        # Windows 11 (build 22000): Qt 6 supports Windows on Arm from 11 on.
        Target("windows", "arm64", "windows-11-arm", "-setup.exe", "Windows 11 on Arm", (10, 0, 22000)),
        # macOS 14: numpy's wheels for macOS 14 and later use Accelerate, and pip picks them on these runners;
        # PySide6 6.11 needs 13.
        Target("macos", "arm64", "macos-15", ".dmg", "macOS 14 or later, Apple silicon", (14, 0)),
        Target("macos", "x86_64", "macos-15-intel", ".dmg", "macOS 14 or later, Intel", (14, 0)),
    )
}
GLIBC_FLOOR = TARGETS["linux-x86_64"].floor  # the x86-64 Linux bundle may need no newer glibc than Ubuntu 22.04's


def floor_of(system: str, arch: str) -> tuple[int, ...]:
    """The floor of the release target built for `system` on `arch` (x86_64 where no target has that arch)."""
    t = TARGETS.get(f"{system}-{arch}") or TARGETS[f"{system}-x86_64"]
    return t.floor


def target(key: str) -> Target:
    if key not in TARGETS:
        raise UserError(f"unknown target {key!r}: one of {', '.join(TARGETS)}")
    return TARGETS[key]


def release_file(t: Target, version: str, name: str = NAME) -> str:
    """The published file's name: what build_installer.py --with-demo-model makes on that system."""
    return Meta(name, version, "", with_demo=True).artefact_base(t.os, t.arch) + t.suffix


def version() -> str:
    return read_meta(REPO, NAME, with_demo=True).version


def check_tag(tag: str, wanted: str) -> None:
    if tag != f"v{wanted}":
        raise UserError(f"tag {tag!r} does not match pyproject.toml's version {wanted}: tag v{wanted}, or bump it")


def collect_release_file(t: Target, out: Path, into: Path, ver: str) -> Path:
    """Copy this job's release file (and its self-test record) from build_installer.py's `out` to `into`."""
    if t.arch != this_arch():
        raise UserError(f"target {t.key} is built on {t.arch}, and this machine is {this_arch()}")
    name = release_file(t, ver)
    found = out / name
    if not found.is_file():
        there = ", ".join(sorted(p.name for p in out.iterdir())) if out.is_dir() else "no such folder"
        raise UserError(f"{found} was not built ({out} holds: {there or 'nothing'})")
    record = out / (name + RECORD)
    if not record.is_file():
        raise UserError(f"{record} is missing: run `python -m installer.selftest` on {name} before collecting it")
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found, into / name)
    shutil.copyfile(record, into / record.name)
    return into / name


def release_files(folder: Path, ver: str) -> list[Path]:
    """Every target's file in `folder`; one missing or one unexpected is an error, not a smaller release."""
    wanted = {release_file(t, ver) for t in TARGETS.values()}
    present = {p.name for p in folder.iterdir() if p.is_file() and not p.name.endswith(RECORD) and p.name != SUMS}
    if present != wanted:
        missing, extra = sorted(wanted - present), sorted(present - wanted)
        raise UserError(f"{folder}: missing {missing or 'nothing'}, unexpected {extra or 'nothing'}")
    return [folder / n for n in sorted(wanted)]


def write_sums(files: Sequence[Path], folder: Path) -> Path:
    """`sha256sum -c SHA256SUMS` and `shasum -a 256 -c SHA256SUMS` read this format."""
    path = folder / SUMS
    path.write_text("".join(f"{sha256(f)}  {f.name}\n" for f in files))
    return path


def notes(files: Sequence[Path], ver: str) -> str:
    """The release's text: each file, its system, size, where it was built and which self-tests it passed."""
    by_name = {release_file(t, ver): t for t in TARGETS.values()}
    rows = []
    for f in files:
        record = json.loads(f.with_name(f.name + RECORD).read_text())
        tested = f"{record['built_on']}: {', '.join(record['checks'])}"
        rows.append(f"| {by_name[f.name].system} | `{f.name}` | {human(f.stat().st_size)} | {tested} |")
    return "\n".join(
        [
            f"SpecQuant {ver}. Each file includes the demo model (SmolLM2-135M-Instruct), so the first chat works "
            "offline. How to install, and what an unsigned file makes Windows or macOS say: docs/installers.md.",
            "",
            "| System | File | Size | Built and self-tested on |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Check a download against `{SUMS}`: `sha256sum -c {SUMS} --ignore-missing` (Linux), "
            f"`shasum -a 256 -c {SUMS} --ignore-missing` (macOS), `Get-FileHash FILE` (Windows PowerShell).",
        ]
    )


def publish(folder: Path, tag: str, ver: str, gh: str = "gh") -> list[str]:
    """Check the tag and the files, write SHA256SUMS and the notes, and create the release with GitHub's CLI."""
    check_tag(tag, ver)
    files = release_files(folder, ver)
    sums = write_sums(files, folder)
    notes_file = folder.parent / "release-notes.md"
    notes_file.write_text(notes(files, ver) + "\n")
    cmd = [gh, "release", "create", tag, "--verify-tag", "--title", f"{NAME} {ver}", "--notes-file", str(notes_file)]
    if re.search(r"[a-z]", ver):  # 0.2.0rc1, 0.2.0.dev1: not offered as the latest release
        cmd.append("--prerelease")
    cmd += [str(f) for f in files] + [str(sums)]
    if subprocess.run(cmd).returncode != 0:
        raise UserError(f"`{' '.join(cmd[:4])}` failed (its message is above)")
    return cmd


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m installer.release", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    tag = sub.add_parser("check-tag", help="the tag must be v + pyproject.toml's version")
    tag.add_argument("tag")
    col = sub.add_parser("collect", help="copy this job's release file and self-test record for upload")
    col.add_argument("target", help=", ".join(TARGETS))
    col.add_argument("--out", type=Path, default=Path("dist"), help="build_installer.py's --out (default: dist)")
    col.add_argument("--into", type=Path, default=Path("upload"), help="the folder to upload (default: upload)")
    pub = sub.add_parser("publish", help="SHA256SUMS, release notes and `gh release create`")
    pub.add_argument("folder", type=Path, help="every build job's upload, merged")
    pub.add_argument("--tag", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        ver = version()
        if args.command == "check-tag":
            check_tag(args.tag, ver)
            print(f"release: tag {args.tag} matches version {ver}")
        elif args.command == "collect":
            made = collect_release_file(target(args.target), args.out, args.into, ver)
            print(f"release: {made}  {human(made.stat().st_size)}  sha256 {sha256(made)}")
        else:
            publish(args.folder, args.tag, ver)
            print(f"release: {args.tag} published")
        return 0

    return run_command("release", body)


if __name__ == "__main__":
    sys.exit(main())
