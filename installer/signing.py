"""Signing in the release jobs: each step runs when all of its secrets are set, says plainly that it is
skipped when none are, and stops with one line naming what is missing when only some are.

    python -m installer.signing windows --out dist          sign the programs, then compile the setup (its
                                                            uninstaller signed too); unsigned without secrets
    python -m installer.signing macos-keychain              put the Developer ID certificate in a keychain
    python -m installer.signing macos-notarise --out dist   sign, notarise and staple the .dmg

The secrets (repository secrets the workflow passes as environment variables; docs/installers.md):
WINDOWS_CERTIFICATE (a .pfx, base64) and WINDOWS_CERTIFICATE_PASSWORD; MACOS_CERTIFICATE (a Developer ID
Application .p12, base64), MACOS_CERTIFICATE_PASSWORD and MACOS_SIGNING_IDENTITY; for notarisation
MACOS_NOTARY_KEY (an App Store Connect API key .p8, base64), MACOS_NOTARY_KEY_ID and MACOS_NOTARY_ISSUER.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from installer import windows
from installer.metadata import Meta, read_meta
from installer.retry import timed_run
from runtime.errors import SpecQuantError, UserError, run_command

REPO = Path(__file__).resolve().parents[1]
TIMESTAMP_URL = "http://timestamp.digicert.com"  # RFC 3161; signatures stay valid after the certificate expires
KEYCHAIN = "specquant-signing.keychain-db"


@dataclass(frozen=True)
class Secrets:
    what: str  # "Windows signing"
    names: tuple[str, ...]
    without: str  # what users see when this step is skipped


WINDOWS = Secrets(
    "Windows signing",
    ("WINDOWS_CERTIFICATE", "WINDOWS_CERTIFICATE_PASSWORD"),
    "SmartScreen warns before the setup runs",
)
MACOS = Secrets(
    "macOS signing",
    ("MACOS_CERTIFICATE", "MACOS_CERTIFICATE_PASSWORD", "MACOS_SIGNING_IDENTITY"),
    "Gatekeeper refuses the first open until the user Control-clicks Open",
)
NOTARY = Secrets(
    "macOS notarisation",
    ("MACOS_NOTARY_KEY", "MACOS_NOTARY_KEY_ID", "MACOS_NOTARY_ISSUER"),
    "Gatekeeper refuses the first open until the user Control-clicks Open",
)


def signing_values(group: Secrets, env: Mapping[str, str]) -> dict[str, str] | None:
    """The group's values when all are set; None when none is (the step is skipped); an error when some are."""
    values = {name: env.get(name, "") for name in group.names}
    given = [name for name, value in values.items() if value]
    if not given:
        return None
    missing = [name for name in group.names if not values[name]]
    if missing:
        raise UserError(f"{group.what}: {', '.join(given)} set but {', '.join(missing)} not: set all of them, or none")
    return values


def skipped(group: Secrets, env: Mapping[str, str]) -> str:
    """The skip message; in GitHub Actions a notice, so it shows on the run's summary page."""
    text = f"{group.what} skipped: {', '.join(group.names)} not set, so {group.without} (docs/installers.md)"
    return f"::notice title={group.what} skipped::{text}" if env.get("GITHUB_ACTIONS") == "true" else text


def decoded(name: str, value: str, into: Path) -> Path:
    """A base64 secret written to a file the step deletes afterwards."""
    try:
        # Line breaks are allowed: `base64` wraps its output at 76 characters unless told not to.
        into.write_bytes(base64.b64decode("".join(value.split()), validate=True))
    except (binascii.Error, ValueError):
        raise UserError(f"{name} is not base64: encode the file with `base64 FILE` and paste all of it") from None
    return into


def _run(cmd: Sequence[str], what: str, timeout: float = 1800) -> None:
    """Run a signing tool; its arguments hold passwords, so a failure (or a hang) names the step, never the
    command's arguments."""
    if timed_run(cmd, what, timeout, secret=True).returncode != 0:
        raise SpecQuantError(f"{what} failed (the tool's message is above)")


# --- Windows -------------------------------------------------------------------------------------------------


def find_signtool() -> str:
    """signtool.exe: on PATH, else the newest Windows SDK's x64 copy (GitHub's Windows runners have one)."""
    found = shutil.which("signtool")
    if found:
        return found
    kits = Path(os.environ.get("PROGRAMFILES(X86)", r"C:\Program Files (x86)")) / "Windows Kits" / "10" / "bin"
    copies = sorted(kits.glob("10.*/x64/signtool.exe"), key=lambda p: [int(x) for x in p.parts[-3].split(".")])
    if not copies:
        raise UserError(f"signtool.exe is neither on PATH nor under {kits}: install the Windows SDK")
    return str(copies[-1])


def signtool_command(signtool: str, pfx: Path, password: str, files: Sequence[Path]) -> list[str]:
    return [signtool, "sign", "/fd", "sha256", "/tr", TIMESTAMP_URL, "/td", "sha256", "/f", str(pfx), "/p", password,
            *map(str, files)]


def inno_sign_tool(signtool: str, pfx: Path, password: str) -> str:
    """The same command as Inno Setup's SignTool line: $q is a quote, $f the file to sign, $$ a dollar."""

    def esc(text: str) -> str:
        return text.replace("$", "$$")

    return (f"$q{esc(signtool)}$q sign /fd sha256 /tr {TIMESTAMP_URL} /td sha256 /f $q{esc(str(pfx))}$q "
            f"/p $q{esc(password)}$q $f")


def sign_windows(out: Path, meta: Meta, env: Mapping[str, str]) -> Path:
    """Sign the bundle's programs (when the secrets are set), then compile the setup with Inno Setup."""
    folder = out / meta.artefact_base("windows")
    if not (folder / "specquant-app.exe").is_file():
        raise UserError(f"{folder} holds no specquant-app.exe: run build_installer.py --with-demo-model first")
    iscc = windows.pinned_iscc().path
    print(f"signing: compiling the setup with Inno Setup {windows.INNO_SETUP_VERSION} at {iscc}")
    values = signing_values(WINDOWS, env)
    if values is None:
        print(skipped(WINDOWS, env))
        return windows.compile_setup(out, meta, iscc)
    password = values["WINDOWS_CERTIFICATE_PASSWORD"]
    if '"' in password:
        raise UserError('WINDOWS_CERTIFICATE_PASSWORD holds a double quote, which Inno Setup cannot pass on')
    signtool = find_signtool()
    with tempfile.TemporaryDirectory() as tmp:
        pfx = decoded("WINDOWS_CERTIFICATE", values["WINDOWS_CERTIFICATE"], Path(tmp) / "certificate.pfx")
        programs = [folder / "specquant-app.exe", folder / "specquant.exe"]
        _run(signtool_command(signtool, pfx, password, programs), "signing the programs with signtool")
        setup = windows.compile_setup(out, meta, iscc, inno_sign_tool(signtool, pfx, password))
    _run([signtool, "verify", "/pa", str(setup)], f"checking the signature of {setup.name}")
    print(f"signing: {setup.name}, its uninstaller and the programs are signed and timestamped")
    return setup


# --- macOS ---------------------------------------------------------------------------------------------------


def keychain_commands(p12: Path, p12_password: str, keychain_password: str) -> list[list[str]]:
    """A keychain of its own for the certificate, unlocked for the job, that codesign may use unprompted."""
    return [
        ["security", "create-keychain", "-p", keychain_password, KEYCHAIN],
        ["security", "set-keychain-settings", "-lut", "21600", KEYCHAIN],
        ["security", "unlock-keychain", "-p", keychain_password, KEYCHAIN],
        ["security", "import", str(p12), "-k", KEYCHAIN, "-P", p12_password, "-T", "/usr/bin/codesign"],
        ["security", "set-key-partition-list", "-S", "apple-tool:,apple:,codesign:", "-s", "-k", keychain_password,
         KEYCHAIN],
        ["security", "list-keychains", "-d", "user", "-s", KEYCHAIN, "login.keychain-db"],
    ]


def macos_keychain(env: Mapping[str, str]) -> None:
    values = signing_values(MACOS, env)
    if values is None:
        print(skipped(MACOS, env))
        return
    with tempfile.TemporaryDirectory() as tmp:
        p12 = decoded("MACOS_CERTIFICATE", values["MACOS_CERTIFICATE"], Path(tmp) / "certificate.p12")
        for cmd in keychain_commands(p12, values["MACOS_CERTIFICATE_PASSWORD"], secrets.token_hex(16)):
            _run(cmd, f"`security {cmd[1]}`")
    found = timed_run(["security", "find-identity", "-v", "-p", "codesigning", KEYCHAIN],
                      "listing the keychain's identities", 120, capture_output=True, text=True).stdout
    if values["MACOS_SIGNING_IDENTITY"] not in found:
        raise UserError("MACOS_SIGNING_IDENTITY names no identity in MACOS_CERTIFICATE "
                        "(it should read \"Developer ID Application: NAME (TEAMID)\")")
    print("signing: the Developer ID certificate is in the job's keychain; the build signs with it")


def notarytool_command(dmg: Path, key: Path, key_id: str, issuer: str) -> list[str]:
    return ["xcrun", "notarytool", "submit", str(dmg), "--key", str(key), "--key-id", key_id, "--issuer", issuer,
            "--wait", "--output-format", "json"]


def macos_notarise(out: Path, meta: Meta, env: Mapping[str, str]) -> None:
    """Check the app's signature (the build made it), sign the .dmg, notarise it and staple the ticket."""
    dmg = out / f"{meta.artefact_base('macos')}.dmg"
    app = out / f"{meta.name}.app"
    if not dmg.is_file():
        raise UserError(f"{dmg} was not built: run build_installer.py --with-demo-model first")
    signing, notary = signing_values(MACOS, env), signing_values(NOTARY, env)
    if signing is None:
        if notary is not None:
            raise UserError(f"macOS notarisation needs a signed app, but {', '.join(MACOS.names)} are not set")
        print(skipped(MACOS, env))
        return
    _run(["codesign", "--verify", "--deep", "--strict", "--verbose=2", str(app)], f"checking {app.name}'s signature")
    identity = signing["MACOS_SIGNING_IDENTITY"]
    _run(["codesign", "--force", "--sign", identity, "--timestamp", str(dmg)], f"signing {dmg.name}")
    if notary is None:
        print(skipped(NOTARY, env))
        return
    with tempfile.TemporaryDirectory() as tmp:
        key = decoded("MACOS_NOTARY_KEY", notary["MACOS_NOTARY_KEY"], Path(tmp) / "notary-key.p8")
        cmd = notarytool_command(dmg, key, notary["MACOS_NOTARY_KEY_ID"], notary["MACOS_NOTARY_ISSUER"])
        # notarytool --wait: Apple's queue, usually minutes.
        done = timed_run(cmd, f"notarising {dmg.name}", 3600, secret=True, capture_output=True, text=True)
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = {}
    if done.returncode != 0 or answer.get("status") != "Accepted":
        print(done.stdout + done.stderr, file=sys.stderr)
        raise SpecQuantError(f"Apple did not accept {dmg.name} ({answer.get('status', 'no answer')}): "
                             f"`xcrun notarytool log {answer.get('id', 'ID')}` names the binary at fault")
    _run(["xcrun", "stapler", "staple", str(dmg)], f"stapling the notarisation ticket to {dmg.name}")
    _run(["spctl", "--assess", "--type", "open", "--context", "context:primary-signature", "-v", str(dmg)],
         f"Gatekeeper's check of {dmg.name}")
    print(f"signing: {dmg.name} is signed, notarised and stapled")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m installer.signing", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    win = sub.add_parser("windows", help="sign the programs (if the secrets are set) and compile the setup")
    win.add_argument("--out", type=Path, default=Path("dist"), help="build_installer.py's --out (default: dist)")
    sub.add_parser("macos-keychain", help="import the Developer ID certificate before the build")
    mac = sub.add_parser("macos-notarise", help="sign, notarise and staple the .dmg")
    mac.add_argument("--out", type=Path, default=Path("dist"), help="build_installer.py's --out (default: dist)")
    return p


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    environ = os.environ if env is None else env

    def body() -> int:
        meta = read_meta(REPO, "SpecQuant", with_demo=True)
        if args.command == "windows":
            sign_windows(args.out, meta, environ)
        elif args.command == "macos-keychain":
            macos_keychain(environ)
        else:
            macos_notarise(args.out, meta, environ)
        return 0

    return run_command("signing", body)


if __name__ == "__main__":
    sys.exit(main())
