"""The files planner is given and the files it writes: every path is untrusted.

Reading: only regular files (a FIFO would block forever, /dev/zero never ends, a folder is not a
file), each kind under a size cap read before anything is parsed, and every way opening can fail
(missing, a broken or looping symbolic link, no permission, a name too long) as one line naming the
path and the fix. A URL is read under the same cap, whole within an overall deadline.

Writing (`-o`, the prices.yaml `prices update` rewrites: every file planner writes): a regular file (or a new name) is written beside the target and renamed onto it, so
a failure never leaves half a plan; a symbolic link is written through, and a target that is not a
regular file (a terminal, /dev/null, a FIFO) is written directly, never replaced.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from planner.errors import PlannerInputError
from planner.units import MiB


@dataclass(frozen=True)
class FileKind:
    """What a file is for: the field an error names, how large it may be, and how to get a good one."""

    field: str
    max_bytes: int | None  # None: no cap (weights files, read only as far as their headers)
    fix: str


# Caps, each far above the largest real file of its kind, and small enough to parse within planner's memory.
# The shipped scenarios are 1-3 KB and a fleet holds at most 200 workloads (the schema's limit) at ~0.5 KB each.
SCENARIO = FileKind("scenario", 4 * MiB, "check the path")
# Published config.json files are 1-10 KB (tests/data/configs: 0.8 KB); label maps can add a few hundred KB.
CONFIG = FileKind("model", 4 * MiB, "check the path")
# `solve --format json` writes ~2.3 KB per plan plus ~220 B per GPU (measured on scenarios/8b-budget.yaml):
# 101 plans (best + top 100) of 64 GPUs each come to ~1.7 MB.
PLAN = FileKind("plan", 16 * MiB, "write one with `planner solve SCENARIO --format json -o PLAN.json`")
CHECKPOINT = FileKind("model", None, "check the model folder")
# a simulate trace: ~60 B a request, so the simulator's 20,000-request cap (planner.estimator.simulate) fits in ~1.2 MB
TRACE = FileKind("--arrivals", 4 * MiB, "give a JSONL trace of {arrival_s, prompt_tokens, output_tokens}, one a line")
# catalogs/prices.yaml is 38 KB; the GPU rows of every SkyPilot cloud together add well under 1 MB
PRICES = FileKind("--prices", 4 * MiB, "give a prices.yaml (planner's own is catalogs/prices.yaml)")
# SkyPilot's vms.csv: AWS's, the largest (one row per instance type and zone), is about 30 MB
SKYPILOT_CSV = FileKind("--from", 48 * MiB, "give a skypilot-catalog catalogs/v<N> folder (holding <cloud>/vms.csv) "
                        "or its URL")

_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _what(mode: int) -> str | None:
    """'a FIFO (named pipe)' etc. for anything that is not a regular file, None for a regular file."""
    return next((name for test, name in _NOT_REGULAR if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def _open_failure(path: Path, exc: OSError, kind: FileKind) -> PlannerInputError:
    shown = str(path)
    if exc.errno == errno.ENOENT and os.path.islink(path):
        why = f"a symbolic link to {os.readlink(path)!r}, which does not exist"
    elif exc.errno == errno.ELOOP:
        why = "a loop of symbolic links"
    elif exc.errno == errno.ENAMETOOLONG:
        why = "the name is longer than the filesystem allows"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied: planner needs to read it and to search every folder above it"
    elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
        why = "no such file"
    else:
        why = exc.strerror or exc.__class__.__name__
    return PlannerInputError(f"{kind.field}: cannot read {shown!r} ({why}); {kind.fix}")


def open_regular(path: str | Path, kind: FileKind) -> BinaryIO:
    """Open a regular file for reading, refusing anything else before a byte is read.

    O_NONBLOCK makes opening a FIFO return at once (instead of waiting for a writer), so it can be refused."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _open_failure(p, exc, kind) from None
    except ValueError:  # a NUL in the name
        raise PlannerInputError(f"{kind.field}: {str(p)!r} cannot be a file name (it holds NUL); {kind.fix}") from None
    try:
        info = os.fstat(fd)
        what = _what(info.st_mode)
        if what is not None:
            raise PlannerInputError(f"{kind.field}: {str(p)!r} is {what}, not a regular file; {kind.fix}")
        if kind.max_bytes is not None and info.st_size > kind.max_bytes:
            raise PlannerInputError(f"{kind.field}: {str(p)!r} holds {info.st_size:,} bytes, more than any real "
                                    f"{kind.field} file (planner reads at most {kind.max_bytes // MiB} MiB); {kind.fix}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, kind: FileKind) -> bytes:
    """The whole of a regular file under its kind's cap (a file that grows while read is cut at the cap and refused)."""
    with open_regular(path, kind) as handle:
        limit = kind.max_bytes
        try:
            data = handle.read() if limit is None else handle.read(limit + 1)
        except OSError as exc:
            raise _open_failure(Path(path), exc, kind) from None
    if limit is not None and len(data) > limit:
        raise PlannerInputError(f"{kind.field}: {str(path)!r} grew past {limit // MiB} MiB while read; {kind.fix}")
    return data


def read_url(url: str, kind: FileKind, seconds: float) -> bytes:
    """The body at an http(s) URL under the kind's cap, whole within `seconds` however slowly the server answers
    (a socket timeout bounds each wait, not a server that sends a byte at a time): the download runs in a daemon
    thread, given up at the deadline (it ends with the process, or when the server closes)."""
    import threading
    import urllib.error
    import urllib.request

    outcome: dict[str, Any] = {}
    limit = kind.max_bytes

    def fetch() -> None:
        try:
            with urllib.request.urlopen(url, timeout=seconds) as response:  # noqa: S310 (the caller checks http(s))
                outcome["data"] = response.read() if limit is None else response.read(limit + 1)
        except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a URL urllib cannot parse
            outcome["error"] = getattr(exc, "reason", exc)
        except Exception as exc:  # noqa: BLE001 - http.client's own protocol errors (a reply that is not HTTP)
            outcome["error"] = exc.__class__.__name__

    worker = threading.Thread(target=fetch, name="planner-download", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise PlannerInputError(f"{kind.field}: {url} did not answer in full within {seconds:g} s; {kind.fix}")
    if "error" in outcome:
        raise PlannerInputError(f"{kind.field}: cannot fetch {url} ({outcome['error']}); {kind.fix}")
    data: bytes = outcome["data"]
    if limit is not None and len(data) > limit:
        raise PlannerInputError(f"{kind.field}: {url} sends more than any real {kind.field} file (planner reads at "
                                f"most {limit // MiB} MiB); {kind.fix}")
    return data


def read_text(path: str | Path, kind: FileKind) -> str:
    try:
        return read_bytes(path, kind).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlannerInputError(f"{kind.field}: {str(path)!r} is not UTF-8 text (byte {exc.start:,}); "
                                "save it as UTF-8") from None


# ---------------------------------------------------------------------------------------------
# Writing


def write_output(path: str, text: str, field: str = "--output") -> None:
    """Write `text` to the file given to -o: atomically onto a regular file, directly onto anything else."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PlannerInputError(f"{field}: the output holds {text[exc.start]!r}, which UTF-8 cannot hold; "
                                "remove it from the input") from None
    given = Path(path)
    try:
        info: os.stat_result | None = os.stat(given)  # through every link, the kernel's own (/dev/stdout) too
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise _write_failure(given, exc, field) from None
    except ValueError:
        raise PlannerInputError(f"{field}: {str(path)!r} cannot be a file name (it holds NUL); give another path") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise PlannerInputError(f"{field}: {str(path)!r} is a folder; give a file name")
    if info is not None and not stat.S_ISREG(info.st_mode):
        _write_in_place(given, data, field)
        return
    if info is not None and _names_an_open_file(given):
        _write_in_place(given, data, field)  # as `sort -o /dev/stdout` writes: the file the shell opened, truncated
        return
    # a link is written through, as a shell's `>` does (a dangling one creates its target)
    target = Path(os.path.realpath(given))
    if info is not None and not os.access(target, os.W_OK):
        raise PlannerInputError(f"{field}: {str(path)!r} is read-only; make it writable or give another path")
    else:
        _replace(target, data, info, field)


def _names_an_open_file(path: Path) -> bool:
    """Whether the path leads through /proc/<pid>/fd/N, where /dev/stdout and /dev/fd/N go: such a link names
    a file some process holds open (a shell's redirection), which is written, never replaced by a rename."""
    try:
        proc = os.stat("/proc").st_dev
    except OSError:
        return False
    current = str(path)
    for _ in range(40):  # Linux follows at most 40 links in a path (MAXSYMLINKS)
        try:
            info = os.lstat(current)
        except OSError:
            return False
        if info.st_dev == proc:
            return True
        if not stat.S_ISLNK(info.st_mode):
            return False
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return False


def _write_failure(path: Path, exc: OSError, field: str) -> PlannerInputError:
    where = str(path.parent)
    if exc.errno in (errno.EACCES, errno.EPERM):
        why = f"permission denied: planner cannot create or replace files in {where!r}"
    elif exc.errno == errno.EROFS:
        why = f"{where!r} is on a read-only filesystem"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = f"the disk is full (or the quota or file size limit reached): {exc.strerror}"
    elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
        why = f"folder {where!r} does not exist"
    elif exc.errno == errno.ENAMETOOLONG:
        why = "the name is longer than the filesystem allows"
    elif exc.errno == errno.ENXIO:
        why = "a FIFO that no process is reading"
    elif exc.errno == errno.ELOOP:
        why = "a loop of symbolic links"
    else:
        why = exc.strerror or exc.__class__.__name__
    return PlannerInputError(f"{field}: cannot write {str(path)!r} ({why}); give another path")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_in_place(target: Path, data: bytes, field: str) -> None:
    """A device, a FIFO, a terminal or a file behind /dev/stdout: open it and write, never rename over it
    (O_NONBLOCK: a FIFO without a reader is an error rather than a wait; O_TRUNC only acts on a regular file)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _write_failure(target, exc, field) from None
    try:
        os.set_blocking(fd, True)
        _write_all(fd, data)
    except OSError as exc:
        raise _write_failure(target, exc, field) from None
    finally:
        os.close(fd)


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255  # POSIX NAME_MAX on Linux filesystems (ext4, xfs, tmpfs)


def _temporary_prefix(name: str, room: int) -> str:
    """'.NAME.' cut (on a character boundary) to fit `room` bytes: the temporary's name must fit the filesystem."""
    while len(os.fsencode(f".{name}.")) > room:
        name = name[:-1]
    return f".{name}."


def _replace(target: Path, data: bytes, existing: os.stat_result | None, field: str) -> None:
    """Write beside the target, then rename onto it: a failure never leaves a half-written file."""
    folder, name = target.parent, target.name  # a name past the filesystem's limit failed the stat before
    # mkstemp appends 8 random characters; keep the whole temporary name within the limit
    prefix = _temporary_prefix(name, _name_max(folder) - 8)
    import tempfile  # here, not at the top: with shutil and random it is 4 ms of every command's start

    try:
        fd, temporary = tempfile.mkstemp(prefix=prefix, dir=folder)
    except OSError as exc:
        raise _write_failure(target, exc, field) from None
    try:
        try:
            _write_all(fd, data)
            if existing is not None:
                mode = stat.S_IMODE(existing.st_mode)  # replacing a file keeps its permissions
            else:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask  # a temporary file is private; a new result gets the usual permissions
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise _write_failure(target, exc, field) from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
