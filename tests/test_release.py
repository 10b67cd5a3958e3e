"""The release workflow and the scripts it calls: the workflows lint clean, every file the README offers is one
a release job makes, the tag check, collecting, SHA256SUMS and publishing (with a stand-in `gh`), and
sign-or-skip for each system's secrets. The Linux self-test itself runs in test_installer.py's slow test."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from installer import contents, linux, macos, release, selftest, signing, windows
from installer.metadata import Meta
from tests.conftest import REPO, assert_one_line_error

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
VERSION = release.version()


def python_m(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=REPO, env=env)


# --- the workflows --------------------------------------------------------------------------------------


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: `./setup.sh test` installs the test extra, which has it")
    return found


def test_workflows_exist_and_match_the_github_workflow_schema() -> None:
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "release.yml"]
    checked = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True, text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def run_steps(workflow: dict) -> list[tuple[str, str, str]]:
    """(job, shell, script) of every `run:` step; the shell as GitHub picks it."""
    found = []
    for name, job in workflow["jobs"].items():
        default = job.get("defaults", {}).get("run", {}).get("shell") or workflow.get("defaults", {}).get(
            "run", {}).get("shell") or "bash"
        for step in job["steps"]:
            if "run" in step:
                found.append((name, step.get("shell", default), step["run"]))
    return found


def test_workflow_shell_steps_pass_shellcheck(tmp_path: Path) -> None:
    scripts = 0
    for path in WORKFLOWS:
        for job, shell, script in run_steps(yaml.safe_load(path.read_text())):
            if shell != "bash":
                continue
            # GitHub substitutes ${{ ... }} before the shell runs: a plain word stands in for it here.
            text = "#!/bin/bash\nset -e\n" + re.sub(r"\$\{\{.*?\}\}", "EXPR", script)
            target = tmp_path / f"{path.stem}-{job}-{scripts}.sh"
            target.write_text(text)
            scripts += 1
            checked = subprocess.run([tool("shellcheck"), str(target)], capture_output=True, text=True)
            assert checked.returncode == 0, f"{path.name} ({job}):\n{script}\n{checked.stdout}"
    assert scripts >= 8


def test_shell_scripts_pass_shellcheck(tmp_path: Path) -> None:
    meta = Meta("SpecQuant", "1.2.3", "Desktop LLM runtime", with_demo=True)
    (tmp_path / "install.sh").write_text(linux.install_script(meta))
    (tmp_path / "uninstall.sh").write_text(linux.uninstall_script(meta))
    files = [REPO / "setup.sh", REPO / ".ci" / "run", tmp_path / "install.sh", tmp_path / "uninstall.sh"]
    checked = subprocess.run([tool("shellcheck"), *map(str, files)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def release_workflow() -> dict:
    return yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())


def test_release_jobs_are_the_release_targets_on_their_runners() -> None:
    flow = release_workflow()
    assert flow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    matrix = flow["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert {(m["target"], m["os"]) for m in matrix} == {(t.key, t.runner) for t in release.TARGETS.values()}
    assert flow["jobs"]["publish"]["needs"] == "build"
    assert flow["permissions"] == {"contents": "read"}  # only the publishing job may write


ACTION = re.compile(r"^\s*(?:- )?uses: ([\w-]+/[\w-]+)@(\S+)(?:\s+#\s*(v[\d.]+))?\s*$")


def test_release_actions_are_pinned_by_commit_with_their_tag_beside() -> None:
    """The release jobs hold the signing secrets: a moved tag must not change what runs in them."""
    pinned = [ACTION.match(line) for line in (REPO / ".github/workflows/release.yml").read_text().splitlines()
              if "uses:" in line]
    assert len(pinned) >= 6 and all(pinned)
    for m in pinned:
        assert re.fullmatch(r"[0-9a-f]{40}", m[2]) and m[3], m[0]  # a full SHA, then its tag as a comment
    versions = {(m[1], m[3]) for m in pinned}
    assert {action for action, _ in versions} == {"actions/checkout", "actions/setup-python",
                                                  "actions/upload-artifact", "actions/download-artifact"}
    assert len({m[1]: m[2] for m in pinned}) == len({(m[1], m[2]) for m in pinned})  # one commit per action


def test_release_runs_one_at_a_time_and_uploads_screenshots_apart_from_the_files() -> None:
    flow = release_workflow()
    assert flow["concurrency"] == {"group": "release-${{ github.ref }}", "cancel-in-progress": False}
    steps = flow["jobs"]["build"]["steps"]
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    names = sorted(s["with"]["name"] for s in uploads)
    assert names == ["logs-${{ matrix.target }}", "release-${{ matrix.target }}", "screenshot-${{ matrix.target }}"]
    shot = next(s for s in uploads if s["with"]["name"].startswith("screenshot"))
    assert shot["if"] == "runner.os != 'Linux'" and shot["with"]["path"] == "dist/*.window.png"
    order = [s.get("name", s.get("uses", "")) for s in steps]
    checked = [i for i, s in enumerate(steps) if "installer.contents" in s.get("run", "")]
    assert len(checked) == 3  # one per system
    assert max(checked) < order.index("Collect the file and its self-test record")
    download = next(s for s in flow["jobs"]["publish"]["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"]["pattern"] == "release-*"  # the screenshots are no release files
    floors = flow["jobs"]["build"]["env"]["MACOSX_DEPLOYMENT_TARGET"]
    assert floors == ".".join(map(str, release.TARGETS["macos-arm64"].floor))


def test_every_script_the_workflows_call_exists_with_that_subcommand() -> None:
    parsers = {"installer.release": release.build_parser(), "installer.signing": signing.build_parser(),
               "installer.selftest": selftest.build_parser(), "installer.contents": contents.build_parser()}
    called = set()
    for path in WORKFLOWS:
        for _, _, script in run_steps(yaml.safe_load(path.read_text())):
            for line in script.splitlines():
                if match := re.search(r"python -m (installer\.\S+) (.*?)(?: 2>&1 \| tee \S+)?$", line):
                    module, args = match[1], re.sub(r"\$\{\{.*?\}\}", "linux-x86_64", match[2])
                    parsers[module].parse_args(shlex.split(args.replace('"$GITHUB_REF_NAME"', "v1")))
                    called.add(module)
                if "build_installer.py" in line:
                    from installer.build import build_parser

                    build_parser().parse_args(line.split("build_installer.py", 1)[1].split())
    assert called == set(parsers)
    assert (REPO / ".ci" / "run").is_file()
    ci = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    assert any("bash .ci/run" in s for _, _, s in run_steps(ci))
    assert set(ci[True]) == {"push", "pull_request"}


def test_release_scripts_need_only_the_standard_library() -> None:
    """The publishing job installs nothing, and each build job calls them before its dependencies exist."""
    code = (
        "import sys; import installer.release, installer.signing, installer.selftest, installer.progress, "
        "installer.contents; "
        "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'__main__'}))"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); {code}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['installer', 'runtime']"


# --- what the README offers -----------------------------------------------------------------------------


def download_table(doc: Path, heading: str) -> set[tuple[str, str]]:
    """(system, file) of each row of the table under `heading`, VERSION read as 1.2.3."""
    text = doc.read_text().split(heading, 1)[1]
    rows = set()
    for line in text.splitlines():
        if line.startswith("|") and "`" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            files = re.findall(r"`([^`]+)`", cells[1])
            rows |= {(cells[0], f.replace("VERSION", "1.2.3")) for f in files}
        elif rows and not line.startswith("|"):
            break
    return rows


TABLES = [("README.md", "## Download and install"), ("docs/installers.md", "### Download")]


@pytest.mark.parametrize(("doc", "heading"), TABLES)
def test_download_tables_list_exactly_the_files_a_release_holds(doc: str, heading: str) -> None:
    made = {(t.system, release.release_file(t, "1.2.3")) for t in release.TARGETS.values()}
    assert download_table(REPO / doc, heading) == made


def test_release_file_names_are_what_build_installer_makes_here() -> None:
    meta = Meta("SpecQuant", "1.2.3", "", with_demo=True)
    here = release.TARGETS["linux-x86_64"]
    if sys.platform == "linux" and meta.artefact_base("linux").endswith("x86_64-demo"):
        assert release.release_file(here, "1.2.3") == f"{meta.artefact_base('linux')}.tar.gz"
    names = {key: release.release_file(t, "1.2.3") for key, t in release.TARGETS.items()}
    assert names["windows-x86_64"] == "SpecQuant-1.2.3-windows-x86_64-demo-setup.exe"
    assert names["macos-arm64"] == "SpecQuant-1.2.3-macos-arm64-demo.dmg"
    # ARM: each system's own name for it, as platform.machine() says it on that runner (installer.metadata).
    assert names["windows-arm64"] == "SpecQuant-1.2.3-windows-arm64-demo-setup.exe"
    assert names["linux-aarch64"] == "SpecQuant-1.2.3-linux-aarch64-demo.tar.gz"


def test_every_target_has_its_runner_floor_and_setup() -> None:
    """Issue 64: macOS on macos-15 with the floor kept at 14; the ARM files on GitHub's arm64 runners, each with
    the floor its own dependencies set (PySide6's aarch64 wheels: glibc 2.39; Qt on Windows on Arm: 11)."""
    runners = {key: t.runner for key, t in release.TARGETS.items()}
    assert runners == {"linux-x86_64": "ubuntu-22.04", "linux-aarch64": "ubuntu-24.04-arm",
                       "windows-x86_64": "windows-2022", "windows-arm64": "windows-11-arm",
                       "macos-arm64": "macos-15", "macos-x86_64": "macos-15-intel"}
    assert release.floor_of("macos", "arm64") == release.floor_of("macos", "x86_64") == (14, 0)
    assert release.floor_of("linux", "aarch64") == (2, 39) and release.floor_of("linux", "x86_64") == (2, 35)
    assert release.floor_of("windows", "arm64") == (10, 0, 22000)
    assert "2.39" in release.TARGETS["linux-aarch64"].system and "11" in release.TARGETS["windows-arm64"].system
    arm = windows.inno_script(Meta("SpecQuant", "1.2.3", "x"), "b", "b-setup", arch="arm64").splitlines()
    assert "ArchitecturesAllowed=arm64" in arm and "ArchitecturesInstallIn64BitMode=arm64" in arm
    assert "MinVersion=10.0.22000" in arm
    x64 = windows.inno_script(Meta("SpecQuant", "1.2.3", "x"), "b", "b-setup", arch="x86_64").splitlines()
    assert "ArchitecturesAllowed=x64compatible" in x64 and "MinVersion=10.0.18362" in x64
    with pytest.raises(release.UserError, match="no Windows setup for the architecture 'riscv64'"):
        windows.inno_script(Meta("SpecQuant", "1.2.3", "x"), "b", "b-setup", arch="riscv64")
    matrix = {m["target"]: m for m in release_workflow()["jobs"]["build"]["strategy"]["matrix"]["include"]}
    assert {m["python-arch"] for k, m in matrix.items() if "arm" in k or "aarch64" in k} == {"arm64"}
    assert matrix["windows-arm64"]["vcvars"] == "arm64" and matrix["windows-x86_64"]["vcvars"] == "x64"


def test_every_long_step_has_a_time_limit_and_a_failed_job_keeps_its_evidence() -> None:
    steps = release_workflow()["jobs"]["build"]["steps"]
    long_steps = [s for s in steps if re.search(r"build_installer|installer\.(selftest|contents|signing)|apt-get|choco",
                                                 s.get("run", ""))]
    assert len(long_steps) >= 9
    assert all(0 < s.get("timeout-minutes", 0) <= 90 for s in long_steps), [s["name"] for s in long_steps]
    logs = next(s for s in steps if s.get("with", {}).get("name") == "logs-${{ matrix.target }}")
    assert logs["if"] == "failure() || github.event_name == 'workflow_dispatch'"
    assert set(logs["with"]["path"].split()) == {"dist/logs/", "dist/*.window.png", "dist/*.selftest.json"}
    assert all("tee dist/logs/contents.txt" in s["run"] for s in steps if "installer.contents" in s.get("run", ""))


# --- tag, collect, publish ------------------------------------------------------------------------------


def test_the_tag_must_name_the_version() -> None:
    assert python_m("installer.release", "check-tag", f"v{VERSION}").returncode == 0
    assert_one_line_error(python_m("installer.release", "check-tag", "v99.0.0"), "v99.0.0", VERSION)
    assert_one_line_error(python_m("installer.release", "check-tag", VERSION), "does not match")


def release_folder(folder: Path) -> list[Path]:
    """Every target's file, with a self-test record, as the build jobs upload them."""
    folder.mkdir()
    files = []
    for t in release.TARGETS.values():
        name = release.release_file(t, VERSION)
        (folder / name).write_bytes(name.encode() * 100)
        record = {"file": name, "target": t.key, "built_on": f"GitHub runner {t.runner}", "checks": ["self-test"]}
        (folder / (name + release.RECORD)).write_text(json.dumps(record))
        files.append(folder / name)
    return files


def test_publish_writes_checksums_and_notes_and_calls_gh(tmp_path: Path) -> None:
    files = release_folder(tmp_path / "release")
    calls = tmp_path / "gh-calls"
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    gh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{calls}"\n')
    gh.chmod(0o755)
    env = dict(os.environ, PATH=f"{gh.parent}:{os.environ['PATH']}")
    done = python_m("installer.release", "publish", str(tmp_path / "release"), "--tag", f"v{VERSION}", env=env)
    assert done.returncode == 0, done.stderr
    args = calls.read_text().splitlines()
    assert args[:4] == ["release", "create", f"v{VERSION}", "--verify-tag"]
    uploaded = [Path(a).name for a in args if a.startswith(str(tmp_path))]
    assert sorted(uploaded) == sorted([f.name for f in files] + ["SHA256SUMS", "release-notes.md"])
    assert not any(a.endswith(release.RECORD) for a in args)
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path / "release", capture_output=True, text=True)
    assert sums.returncode == 0 and sums.stdout.count(": OK") == len(release.TARGETS), sums.stdout
    notes = (tmp_path / "release-notes.md").read_text()
    for t in release.TARGETS.values():
        assert f"| {t.system} | `{release.release_file(t, VERSION)}` |" in notes and t.runner in notes


def test_publish_refuses_an_incomplete_release(tmp_path: Path) -> None:
    files = release_folder(tmp_path / "release")
    files[0].unlink()
    done = python_m("installer.release", "publish", str(tmp_path / "release"), "--tag", f"v{VERSION}",
                    env=dict(os.environ, PATH="/nonexistent"))
    assert_one_line_error(done, "missing", files[0].name)
    assert not (tmp_path / "release" / "SHA256SUMS").exists()


def test_collect_takes_the_file_and_its_self_test_record(tmp_path: Path) -> None:
    here = next((t for t in release.TARGETS.values() if t.os == "linux" and t.arch == release.this_arch()), None)
    if here is None:
        pytest.skip(f"no Linux target is built on {release.this_arch()}")
    dist = tmp_path / "dist"
    dist.mkdir()
    name = release.release_file(here, VERSION)
    (dist / name).write_bytes(b"tarball")
    args = ("collect", here.key, "--out", str(dist), "--into", str(tmp_path / "upload"))
    assert_one_line_error(python_m("installer.release", *args), "selftest", name)
    (dist / (name + release.RECORD)).write_text("{}")
    done = python_m("installer.release", *args)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "upload").iterdir()) == [name, name + release.RECORD]
    (dist / name).unlink()
    assert_one_line_error(python_m("installer.release", *args), "was not built", name)
    assert_one_line_error(python_m("installer.release", "collect", "beos-x86"), "unknown target")


# --- signing: sign or skip ------------------------------------------------------------------------------


def test_signing_is_skipped_with_a_notice_when_no_secret_is_set() -> None:
    assert signing.signing_values(signing.WINDOWS, {}) is None
    text = signing.skipped(signing.WINDOWS, {"GITHUB_ACTIONS": "true"})
    assert text.startswith("::notice title=Windows signing skipped::")
    assert "WINDOWS_CERTIFICATE" in text and "SmartScreen" in text
    assert not signing.skipped(signing.NOTARY, {}).startswith("::")


def test_some_secrets_without_the_others_is_a_one_line_error(tmp_path: Path) -> None:
    values = signing.signing_values(signing.WINDOWS, {"WINDOWS_CERTIFICATE": "x", "WINDOWS_CERTIFICATE_PASSWORD": "y"})
    assert values == {"WINDOWS_CERTIFICATE": "x", "WINDOWS_CERTIFICATE_PASSWORD": "y"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WINDOWS_", "MACOS_"))}
    done = python_m("installer.signing", "macos-keychain", env={**env, "MACOS_CERTIFICATE": "abc"})
    assert_one_line_error(done, "MACOS_CERTIFICATE set", "MACOS_CERTIFICATE_PASSWORD", "MACOS_SIGNING_IDENTITY")
    skipped = python_m("installer.signing", "macos-keychain", env=env)
    assert skipped.returncode == 0 and "macOS signing skipped" in skipped.stdout
    done = python_m("installer.signing", "macos-notarise", "--out", str(tmp_path), env=env)
    assert_one_line_error(done, "was not built")
    done = python_m("installer.signing", "windows", "--out", str(tmp_path), env=env)
    assert_one_line_error(done, "specquant-app.exe")
    with pytest.raises(signing.UserError, match="MACOS_NOTARY_KEY is not base64"):
        signing.decoded("MACOS_NOTARY_KEY", "not base64!", tmp_path / "key")
    assert signing.decoded("K", "aGVs\nbG8=\n", tmp_path / "key").read_bytes() == b"hello"  # wrapped base64


def test_windows_signing_commands_timestamp_and_escape_for_inno() -> None:
    pfx = Path("C:/t/cert.pfx")
    cmd = signing.signtool_command("signtool.exe", pfx, "pa$$", [Path("a.exe"), Path("b.exe")])
    assert cmd[:3] == ["signtool.exe", "sign", "/fd"] and cmd[-2:] == ["a.exe", "b.exe"]
    assert cmd[cmd.index("/tr") + 1] == signing.TIMESTAMP_URL and cmd[cmd.index("/td") + 1] == "sha256"
    line = signing.inno_sign_tool("C:/Kits/signtool.exe", pfx, "pa$s")
    assert line.startswith("$qC:/Kits/signtool.exe$q sign /fd sha256 /tr http") and line.endswith("$f")
    assert "/p $qpa$$s$q" in line  # Inno reads $$ as one $
    iscc = windows.iscc_command("ISCC.exe", Path("x.iss"), line)
    assert iscc == ["ISCC.exe", "/Q", "/DSign", f"/Sspecquant={line}", "x.iss"]
    assert windows.iscc_command("ISCC.exe", Path("x.iss"), None) == ["ISCC.exe", "/Q", "x.iss"]
    script = windows.inno_script(Meta("SpecQuant", "1.2.3", "x"), "b", "b-setup")
    assert "#ifdef Sign\nSignTool=specquant\n#endif" in script


def test_macos_signing_uses_the_hardened_runtime_and_a_keychain_of_its_own() -> None:
    app = Path("/x/SpecQuant.app")
    cmd = macos.codesign_command(app, "Developer ID Application: A (T)")
    assert cmd[:2] == ["codesign", "--force"] and cmd[-1] == str(app)
    assert cmd[cmd.index("--options") + 1] == "runtime" and "--timestamp" in cmd
    assert Path(cmd[cmd.index("--entitlements") + 1]).is_file()
    assert macos.codesign_command(app, "-") == ["codesign", "--force", "--sign", "-", str(app)]  # ad hoc
    steps = signing.keychain_commands(Path("/t/c.p12"), "p12pw", "kcpw")
    assert [s[1] for s in steps] == ["create-keychain", "set-keychain-settings", "unlock-keychain", "import",
                                     "set-key-partition-list", "list-keychains"]
    assert all(signing.KEYCHAIN in s for s in steps)
    notary = signing.notarytool_command(Path("/d/a.dmg"), Path("/t/k.p8"), "KEYID", "ISSUER")
    assert notary[:3] == ["xcrun", "notarytool", "submit"] and "--wait" in notary


# --- the self-test's own errors -------------------------------------------------------------------------


def test_selftest_names_a_missing_file_or_the_wrong_system(tmp_path: Path) -> None:
    done = python_m("installer.selftest", "linux-x86_64", "--out", str(tmp_path))
    assert_one_line_error(done, "does not exist", release.release_file(release.TARGETS["linux-x86_64"], VERSION))
    other = "windows-x86_64" if sys.platform != "win32" else "linux-x86_64"
    name = release.release_file(release.TARGETS[other], VERSION)
    (tmp_path / name).write_bytes(b"x")
    assert_one_line_error(python_m("installer.selftest", other, "--out", str(tmp_path)), "is checked on")
    assert "glibc" in selftest.built_on() or sys.platform != "linux"
    runner = {"GITHUB_ACTIONS": "true", "ImageOS": "ubuntu22", "ImageVersion": "20261201.1"}
    assert selftest.built_on(runner).startswith("GitHub runner ubuntu22 20261201.1 (")
