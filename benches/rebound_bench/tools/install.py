"""What the suite installs when it is missing: Debian's tools, Redis, moto; oha from crates.io."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ..util import log, run, sudo


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in [("wrk", "wrk"), ("nginx", "nginx"), ("valgrind", "valgrind"), ("cmake", "cmake"),
                                     ("h2load", "nghttp2-client"), ("openssl", "openssl")]
               if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool)]
    if missing:
        log("installing", " ".join(missing))
        run(sudo() + ["apt-get", "update", "-qq"])
        run(sudo() + ["apt-get", "install", "-y", "-qq"] + missing,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), stdout=subprocess.DEVNULL)


def ensure_oha() -> bool:
    """oha, built from crates.io with cargo (a few minutes on 2 cores); False, and the oha
    rows left out, where that fails."""
    if shutil.which("oha") is None:
        cargo_bin = os.path.join(os.path.expanduser("~"), ".cargo", "bin")
        if os.path.exists(os.path.join(cargo_bin, "oha")):
            os.environ["PATH"] = cargo_bin + os.pathsep + os.environ.get("PATH", "")
        else:
            log("installing oha (cargo install oha: a few minutes)")
            try:
                run(["cargo", "install", "--locked", "oha"], stdout=subprocess.DEVNULL)
                os.environ["PATH"] = cargo_bin + os.pathsep + os.environ.get("PATH", "")
            except (OSError, subprocess.CalledProcessError) as e:
                log(f"oha could not be installed ({e}): its rows are left out")
    return shutil.which("oha") is not None


def ensure_services() -> None:
    """Redis (Debian) and moto (PyPI: DynamoDB and SQS on one port) for the distributed scenarios."""
    if shutil.which("redis-server") is None:
        log("installing redis-server")
        run(sudo() + ["apt-get", "install", "-y", "-qq", "redis-server"],
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), stdout=subprocess.DEVNULL)
    if shutil.which("moto_server") is None:
        log("installing moto[server]")
        run([sys.executable, "-m", "pip", "install", "--quiet", "moto[server]"])
