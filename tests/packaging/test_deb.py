"""The Debian package, end to end: scripts/build-deb builds it, the test unpacks it into a
throwaway root (dpkg-deb -x), checks its layout, control files and systemd unit, does what
postinst does to Twisted's plugin cache, then starts the daemon from the unpacked files with
the packaged config and talks S3 to it with boto3.

The daemon is not run with dpkg -i: that would need root and a Debian root to install into.
The virtualenv is relocatable except for its scripts' #! lines (which name /opt/objstore),
so the unpacked bin/twistd and bin/objstore run through the unpacked bin/python. That run is
also the "plain (non-editable) install" check: the package's venv is a pip install of the
checkout, and twistd has to find the objstore plugin there.

Building the package installs objstore and its dependencies into a new virtualenv (a minute
or more): this module runs once, in the first pass of scripts/test, not in the two-worker
pass of tests/integration.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import boto3
import pytest
import urllib3
from botocore.config import Config

from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, free_port

REPO = Path(__file__).resolve().parents[2]
PREFIX = "opt/objstore"

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        shutil.which("dpkg-deb") is None or not Path("/usr/bin/python3").exists(),
        reason="needs Debian's dpkg-deb and /usr/bin/python3",
    ),
]


class Package:
    def __init__(self, deb: Path, root: Path, control: Path) -> None:
        self.deb = deb
        self.root = root
        self.control = control

    @property
    def python(self) -> Path:
        return self.root / PREFIX / "bin" / "python"

    def site_packages(self) -> Path:
        (site,) = (self.root / PREFIX / "lib").glob("python3*/site-packages")
        return site

    def run(self, script: str, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Run one of the venv's scripts from the unpacked root (its #! names /opt/objstore)."""
        return subprocess.run(
            [str(self.python), str(self.root / PREFIX / "bin" / script), *args],
            capture_output=True, text=True, timeout=120, check=False, **kwargs,  # type: ignore[call-overload]
        )


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Package:
    base = tmp_path_factory.mktemp("deb")
    env = dict(os.environ, OBJSTORE_DEB_COMPRESSION="none")
    built = subprocess.run([str(REPO / "scripts" / "build-deb"), str(base / "out")],
                           capture_output=True, text=True, env=env, timeout=1200, check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    deb = Path(built.stdout.strip().splitlines()[-1])
    assert deb.parent == base / "out" and deb.name.endswith(".deb")
    root, control = base / "root", base / "control"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    return Package(deb, root, control)


def control_fields(package: Package) -> dict[str, str]:
    fields = {}
    for line in (package.control / "control").read_text().splitlines():
        if line and not line[0].isspace() and ":" in line:
            name, value = line.split(":", 1)
            fields[name] = value.strip()
    return fields


def test_control_files(package: Package) -> None:
    fields = control_fields(package)
    assert fields["Package"] == "objstore"
    from objstore import __version__
    assert fields["Version"] == f"{__version__}-1"
    python = fields["Depends"].split(",")[0].strip()
    assert re.fullmatch(r"python3\.\d+", python), fields
    # The venv's interpreter is that package's file (the link dpkg-deb -x kept, resolved here).
    assert os.path.realpath(package.python) == f"/usr/bin/{python}"
    assert (package.control / "conffiles").read_text().split() == ["/etc/objstore/objstore.toml"]
    postinst = (package.control / "postinst").read_text()
    assert "useradd --system" in postinst and "/var/lib/objstore" in postinst
    assert "getPlugins" in postinst
    for script in ("postinst", "prerm", "postrm"):
        path = package.control / script
        assert os.access(path, os.X_OK), script
        subprocess.run(["sh", "-n", str(path)], check=True)


def test_layout(package: Package) -> None:
    root = package.root
    assert (root / "etc/objstore/objstore.toml").read_bytes() == (
        REPO / "etc/objstore.toml").read_bytes()
    assert (root / "lib/systemd/system/objstore.service").is_file()
    assert (root / "usr/share/man/man1/objstore.1.gz").is_file()
    assert (root / "usr/share/man/man8/objstore.8.gz").is_file()
    bash = (root / "usr/share/bash-completion/completions/objstore").read_text()
    assert "complete -o default -F _objstore objstore" in bash
    zsh = (root / "usr/share/zsh/vendor-completions/_objstore").read_text()
    assert zsh.startswith("#compdef objstore\n")
    assert os.readlink(root / "usr/bin/objstore") == "/opt/objstore/bin/objstore"
    # The plugin cache is made on the target by postinst, never shipped stale.
    assert not (package.site_packages() / "twisted/plugins/dropin.cache").exists()
    assert (package.site_packages() / "twisted/plugins/objstore_plugin.py").is_file()
    # No file names the staging directory the venv was built in.
    for script in ("twistd", "objstore"):
        first = (root / PREFIX / "bin" / script).read_text().splitlines()[0]
        assert first == "#!/opt/objstore/bin/python", first
    for path in [root / PREFIX / "pyvenv.cfg", *(root / PREFIX / "bin").iterdir()]:
        if path.is_file() and not path.is_symlink():
            assert str(package.root) not in path.read_text(errors="replace"), path


def unit(package: Package) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(package.root / "lib/systemd/system/objstore.service")
    return parser


def test_systemd_unit(package: Package, tmp_path: Path) -> None:
    service = unit(package)["Service"]
    executable = service["ExecStart"].split()[0]
    assert executable == "/opt/objstore/bin/twistd"
    assert (package.root / executable.lstrip("/")).is_file()
    assert "/etc/objstore/objstore.toml" in service["ExecStart"]
    assert service["User"] == "objstore"
    assert service["Restart"] == "on-failure"
    assert service["ReadWritePaths"] == "/var/lib/objstore"
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    # SIGTERM drains for drain_timeout_seconds, then in-flight requests get as long again.
    config = (package.root / "etc/objstore/objstore.toml").read_text()
    drain = int(re.search(r"^drain_timeout_seconds = (\d+)", config, re.M).group(1))  # type: ignore[union-attr]
    assert int(service["TimeoutStopSec"]) > 2 * drain
    if shutil.which("systemd-analyze") is None:
        return
    # systemd-analyze checks that ExecStart is executable: point it at the unpacked file
    # (--root would need a whole systemd tree); the man pages are checked in test_layout.
    copy = tmp_path / "objstore.service"
    text = (package.root / "lib/systemd/system/objstore.service").read_text()
    copy.write_text(text.replace("ExecStart=/opt/", f"ExecStart={package.root}/opt/"))
    verified = subprocess.run(["systemd-analyze", "verify", "--man=no", str(copy)],
                              capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0 and verified.stderr.strip() == "", verified.stderr


def test_installed_daemon_serves_s3(package: Package, tmp_path: Path) -> None:
    # What postinst does: write Twisted's plugin cache while the files are writable.
    postinst = (package.control / "postinst").read_text()
    code = re.search(r"-c \\\n\s+'([^']+)'", postinst).group(1)  # type: ignore[union-attr]
    subprocess.run([str(package.python), "-c", code], check=True, timeout=120)
    cache = package.site_packages() / "twisted/plugins/dropin.cache"
    assert b"objstore_plugin" in cache.read_bytes()

    listed = package.run("twistd", "--help")
    assert listed.returncode == 0 and re.search(r"^\s+objstore\s", listed.stdout, re.M), listed
    cli = package.run("objstore", "--version")
    from objstore import __version__
    assert cli.stdout.strip() == f"objstore {__version__}", cli

    port = free_port()
    config = (package.root / "etc/objstore/objstore.toml").read_text()
    for old, new in ((r'^host = "0\.0\.0\.0"$', 'host = "127.0.0.1"'),
                     (r"^port = 9000$", f"port = {port}"),
                     (r"^drain_timeout_seconds = \d+$", "drain_timeout_seconds = 1"),
                     (r"^#workers = 2$", "workers = 1"),
                     (r'^data_dir = "\./data"$', f'data_dir = "{tmp_path / "data"}"')):
        config, count = re.subn(old, new, config, count=1, flags=re.M)
        assert count == 1, old
    (tmp_path / "objstore.toml").write_text(config)
    env = dict(os.environ, OBJSTORE_ROOT_ACCESS_KEY=ROOT_ACCESS_KEY,
               OBJSTORE_ROOT_SECRET_KEY=ROOT_SECRET_KEY, TMPDIR=str(tmp_path))
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(package.python), str(package.root / PREFIX / "bin/twistd"), "-n",
             "--pidfile=", "objstore", "--config", str(tmp_path / "objstore.toml")],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(process, f"http://127.0.0.1:{port}", log)
        s3 = boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
            aws_access_key_id=ROOT_ACCESS_KEY, aws_secret_access_key=ROOT_SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        s3.create_bucket(Bucket="packaged")
        s3.put_object(Bucket="packaged", Key="hello.txt", Body=b"from the .deb")
        assert s3.get_object(Bucket="packaged", Key="hello.txt")["Body"].read() == (
            b"from the .deb")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["packaged"]
        process.send_signal(signal.SIGTERM)
        # twistd re-raises SIGTERM after its shutdown (systemd counts that as a clean stop).
        assert process.wait(60) in (0, -signal.SIGTERM), log.read_text()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    assert "deprecat" not in text.lower(), text[-4000:]  # no setuptools/pkg_resources banner
    assert "draining for 1.0s" in text and "Server Shut Down." in text, text[-4000:]


def wait_healthy(process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
    http = urllib3.PoolManager(retries=False, timeout=2.0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"daemon exited with {process.returncode}:\n"
                                 + log.read_text(errors="replace")[-4000:])
        try:
            if http.request("GET", endpoint + "/admin/health").status == 200:
                return
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("daemon not healthy in time:\n" + log.read_text(errors="replace"))
