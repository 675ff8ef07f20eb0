"""Run a command as a user other than root: the fault suite's second run in `make test`.

Root passes every permission check, so the faults that a permission stops (a directory that
refuses writes, a store another user owns) only show as another user; and root-only variants
(tmpfs, bind mounts) only as root. `make test` runs tests/faults both ways.

As root: the command runs as ``nobody`` (uid and gid 65534, no supplementary groups, no
capabilities), with a private home and temp directory of its own. The directories on the way to
the repository and to the interpreter must be traversable by that user; where one is not (a
checkout or pyenv under a 0700 /root), this grants ``nobody`` search (x) on that directory alone
with an ACL (``setfacl``; without it, the other-x bit) for the run, prints each grant, and takes
it back at the end. As another user: the command runs as it is.

Usage: python tools/run_as_nonroot.py -- COMMAND [ARG ...]
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

UID = GID = 65534


def _ancestors(path: Path) -> list[Path]:
    path = path.resolve()
    return [*reversed(path.parents), path] if path.is_dir() else [*reversed(path.parents)]


def _traversable(d: Path) -> bool:
    st = d.stat()
    if st.st_uid == UID:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == GID:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _grant(dirs: list[Path]) -> list[tuple[Path, int | None]]:
    """Give the user search on each directory; return how to take each grant back."""
    undo: list[tuple[Path, int | None]] = []
    setfacl = shutil.which("setfacl")
    for d in dirs:
        if setfacl and subprocess.run([setfacl, "-m", f"u:{UID}:x", str(d)], check=False).returncode == 0:
            undo.append((d, None))
            print(f"run_as_nonroot: granted uid {UID} search on {d} (ACL) for this run", flush=True)
            continue
        mode = stat.S_IMODE(d.stat().st_mode)
        d.chmod(mode | stat.S_IXOTH)
        undo.append((d, mode))
        print(f"run_as_nonroot: granted search (o+x) on {d} for this run", flush=True)
    return undo


def _undo(undo: list[tuple[Path, int | None]]) -> None:
    for d, mode in reversed(undo):
        if mode is None:
            subprocess.run(["setfacl", "-x", f"u:{UID}", str(d)], check=False)
        else:
            d.chmod(mode)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    if os.geteuid() != 0:
        print(f"run_as_nonroot: already uid {os.geteuid()}, running as it is", flush=True)
        return subprocess.run(command, check=False).returncode
    needed = {Path.cwd(), Path(sys.executable).resolve(), Path(shutil.which(command[0]) or command[0])}
    dirs: list[Path] = []
    for p in needed:
        for d in _ancestors(p):
            if d not in dirs and not _traversable(d):
                dirs.append(d)
    scratch = Path(tempfile.mkdtemp(prefix="icemor-nonroot-"))
    (scratch / "home").mkdir()
    (scratch / "tmp").mkdir()
    for p in (scratch, scratch / "home", scratch / "tmp"):
        os.chown(p, UID, GID)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE_"))}
    env.update(HOME=str(scratch / "home"), TMPDIR=str(scratch / "tmp"), USER="nobody", LOGNAME="nobody")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the checkout is root's: no __pycache__ to write there
    undo = _grant(dirs)
    print(f"run_as_nonroot: running as uid {UID} (nobody): {' '.join(command)}", flush=True)
    try:
        return subprocess.run(
            [
                "setpriv",
                f"--reuid={UID}",
                f"--regid={GID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
                *command,
            ],
            env=env,
            check=False,
        ).returncode
    finally:
        _undo(undo)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
