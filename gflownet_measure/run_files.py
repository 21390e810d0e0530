"""Every file a run writes in its folder, written so that a folder from elsewhere cannot turn the run against its user.

``--resume`` writes in a folder that may come from anywhere (copied, unpacked, shared). Everything a run writes there
(checkpoints, ``history.jsonl``, ``samples.npz``, figures, JSON files) goes through this module, which:

- never writes through a symbolic link. A file is written whole to a temporary file beside it, created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh name (``NAME.<pid>-<random>.tmp``: nothing can be waiting there), then
  renamed onto its name with ``os.replace``, which replaces a link found there, never the link's target; an append
  (``history.jsonl``) opens the file with ``O_NOFOLLOW``. A name that is a link is refused before anything is written
  (:class:`RunFileError`, one line naming it), so the user learns that the folder was tampered with.
- never writes outside the run folder. Inside :func:`confined` (the command line confines each process to its run
  folder), the folder of every file is opened one component at a time from the run folder, each with ``O_NOFOLLOW |
  O_DIRECTORY``: a sub-folder that is a link is refused as well, and every operation then goes through that folder's
  descriptor (``openat``, ``renameat``), so no link placed after the check is followed either.
- records what it wrote. In a folder that holds a ``manifest.json`` (:data:`MANIFEST`; the command line starts one in
  each new run folder, and :func:`make_folder` in each folder it makes inside one), each name is added to the manifest
  (itself rewritten as above) before it is first written, and each folder made there before it is made: the
  ``files`` and ``folders`` the run wrote in it, each such folder with its own manifest. :func:`inventory` reads them
  back for ``--overwrite``, which deletes exactly that and refuses a folder that holds anything else.

A folder without a manifest (library use; a run folder of an earlier version) is written the same way, unrecorded.

A write that fails (a disk that filled up, a folder that became read-only) raises an ``OSError`` whose ``filename`` is
the file being written (``out/wall_clock.json``, never its temporary name: the command line prints ``error: FILE:
No space left on device``), also where the writer is a library that reports the failure otherwise (``torch.save``
raises a ``RuntimeError``); and the temporary file is removed, so a failed write leaves the folder as it was.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import stat
import threading
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, NamedTuple

__all__ = [
    "MANIFEST",
    "RunFileError",
    "Inventory",
    "confined",
    "write_file",
    "write_text",
    "append_text",
    "record_file",
    "make_folder",
    "start_manifest",
    "inventory",
]

MANIFEST = "manifest.json"
"""The file that lists, in a folder a run writes, the names of the files it wrote there and of the folders it made."""

_TEMPORARY = re.compile(r"(?P<name>.+)\.\d+-[0-9a-f]{8}\.tmp")  # NAME.<pid>-<random>.tmp: what a killed write leaves
_root: Path | None = None  # the run folder of this process (confined), None: unconfined
_lock = threading.RLock()  # one manifest update at a time (the wall clock writes from a thread of its own)


class RunFileError(ValueError):
    """A run file that cannot be written safely: a symbolic link, not a plain file, or outside the run folder (one line, naming it)."""


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An ``OSError`` inside (from an operation on ``path``, its temporary file or its folder's descriptor) raised again
    with ``path`` as its file name: what the user sees names the run file, not nothing or a temporary name."""
    try:
        yield
    except OSError as e:
        raise _named(e, path) from None


def _named(e: OSError, path: Path) -> OSError:
    if e.errno is None:
        return e
    return OSError(e.errno, e.strerror or os.strerror(e.errno), str(path))  # the subclass of the errno (FileNotFoundError, ...)


class _Temporary(io.FileIO):
    """The temporary file under the writer's buffer: remembers the first ``OSError`` of a write (a disk that filled up),
    which a writing library may report as an exception of its own (``torch.save``: ``RuntimeError: ... unexpected pos``)."""

    error: OSError | None = None

    def write(self, b) -> int | None:  # type: ignore[override]
        try:
            return super().write(b)
        except OSError as e:
            self.error = self.error or e
            raise


@contextlib.contextmanager
def confined(root: Path) -> Iterator[None]:
    """Within this context, every write of this process must lie in the folder ``root`` (reached through no link below it)."""
    global _root
    before, _root = _root, Path(root)
    try:
        yield
    finally:
        _root = before


def is_confined() -> bool:
    return _root is not None


def _refuse_link(path: Path) -> RunFileError:
    return RunFileError(
        f"{path} is a symbolic link: a run never writes through one (it could overwrite a file outside the run folder); remove the link and run again (nothing was written through it)"
    )


def _open_folder(folder: Path, make: bool = False) -> int:
    """A descriptor of ``folder``; inside :func:`confined`, reached from the run folder through no link (``make``: each
    missing folder made, and recorded in its parent's manifest)."""
    folder = Path(os.path.abspath(folder))
    if _root is None:  # the folder as given (library use: the caller's own folder)
        base, parts = folder, []
        if make:
            folder.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(os.path.abspath(_root))
        try:
            parts = list(folder.relative_to(base).parts)
        except ValueError:
            raise RunFileError(f"{folder} lies outside the run folder {_root}: a run writes only inside its folder") from None
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for k, part in enumerate(parts):
            here = base.joinpath(*parts[: k + 1])
            if make:
                _make_one(fd, base.joinpath(*parts[:k]), part)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                if _is_link(fd, part):
                    raise _refuse_link(here) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_one(parent_fd: int, parent: Path, name: str) -> None:
    """Make the folder ``name`` in ``parent`` unless something is there; recorded first, and given a manifest, where ``parent`` has one."""
    try:
        os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        return  # there already (a link is refused when it is opened)
    except FileNotFoundError:
        pass
    recorded = _record(parent_fd, parent, name, "folders")
    with _naming(parent / name):
        os.mkdir(name, dir_fd=parent_fd)
    if recorded:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            _replace(fd, parent / name / MANIFEST, _manifest_bytes({"files": [], "folders": []}))
        finally:
            os.close(fd)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_name(fd: int, path: Path) -> None:
    """``path`` (in the folder ``fd``) is absent or a plain file: a link or anything else is refused."""
    try:
        with _naming(path):
            mode = os.stat(path.name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise _refuse_link(path)
    if not stat.S_ISREG(mode):
        raise RunFileError(f"{path} is not a plain file (a folder, a device or a pipe), where a run writes one; move it away and run again")


def _replace(fd: int, path: Path, write: Callable[[BinaryIO], object] | bytes, previous: str | None = None) -> None:
    """``write(f)`` into a fresh temporary file in the folder ``fd``, renamed onto ``path.name`` (after renaming the file
    there to ``previous``, where given); the temporary file is removed if anything fails."""
    tmp = f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    with _naming(path):
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
    raw: _Temporary | None = None
    try:
        with _naming(path):
            raw = _Temporary(out, "wb")
            try:
                with io.BufferedWriter(raw) as f:
                    f.write(write) if isinstance(write, bytes) else write(f)
            except Exception:
                if raw.error is not None:  # the disk refused a write, whatever the writer made of it
                    raise raw.error from None
                raise
            if previous is not None:
                try:
                    os.replace(path.name, previous, src_dir_fd=fd, dst_dir_fd=fd)
                except FileNotFoundError:
                    pass
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            raw.close() if raw is not None else os.close(out)  # (closed already, unless the buffer could not be made)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise


def _manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps({"files": sorted(manifest["files"]), "folders": sorted(manifest["folders"])}, indent=1) + "\n").encode()


def _read_manifest(fd: int, folder: Path) -> dict | None:
    """The manifest of the folder ``fd`` (``{"files": [...], "folders": [...]}``), or ``None`` where it has none."""
    path = folder / MANIFEST
    try:
        m = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError:
        if _is_link(fd, MANIFEST):
            raise _refuse_link(path) from None
        raise
    with os.fdopen(m, "rb") as f:
        text = f.read()
    try:
        manifest = json.loads(text)
    except ValueError as e:
        raise RunFileError(f"{path} cannot be read ({type(e).__name__}: {e}); it lists what the run wrote in {folder}: restore it") from None
    if not (
        isinstance(manifest, dict) and all(isinstance(manifest.get(k), list) and all(isinstance(n, str) for n in manifest[k]) for k in ("files", "folders"))
    ):
        raise RunFileError(f"{path} is not a run's manifest (it lacks the lists files and folders); restore it")
    return manifest


def _record(fd: int, folder: Path, name: str, kind: str) -> bool:
    """Add ``name`` to the ``kind`` (files, folders) of the manifest of the folder ``fd``; whether it has a manifest."""
    if name == MANIFEST:
        return True
    with _lock:
        manifest = _read_manifest(fd, folder)
        if manifest is None:
            return False
        if name not in manifest[kind]:
            manifest[kind].append(name)
            _check_name(fd, folder / MANIFEST)
            _replace(fd, folder / MANIFEST, _manifest_bytes(manifest))
        return True


def _folder_of(path: Path) -> int:
    try:
        return _open_folder(path.parent)
    except FileNotFoundError:
        raise FileNotFoundError(2, "No such file or directory", str(path.parent)) from None


def write_file(path: Path, write: Callable[[BinaryIO], object], previous: str | None = None) -> None:
    """``write(f)`` on a binary file object, made the content of ``path`` at once (a reader never sees half a file), as
    the module says: through no link, inside the run folder, recorded in the folder's manifest. ``previous``: the name
    (in the same folder) to which the file at ``path`` is renamed first (e.g. a checkpoint's previous version)."""
    path = Path(path)
    fd = _folder_of(path)
    try:
        _check_name(fd, path)
        _record(fd, path.parent, path.name, "files")
        if previous is not None:
            _check_name(fd, path.parent / previous)
            _record(fd, path.parent, previous, "files")
        _replace(fd, path, write, previous)
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """``text`` (UTF-8) as the content of ``path``, written as :func:`write_file` writes."""
    write_file(path, lambda f: f.write(text.encode()))


def append_text(path: Path, text: str) -> None:
    """``text`` (UTF-8) appended to ``path`` (made if missing), opened with ``O_NOFOLLOW`` inside the run folder; an append
    that fails is cut off again (the file keeps its earlier lines, not half of the new ones)."""
    path = Path(path)
    fd = _folder_of(path)
    try:
        _check_name(fd, path)
        _record(fd, path.parent, path.name, "files")
        try:
            out = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
        except OSError as e:
            if _is_link(fd, path.name):
                raise _refuse_link(path) from None
            raise _named(e, path) from None
        with _naming(path):
            try:
                end, rest = os.fstat(out).st_size, memoryview(text.encode())
            except OSError:
                os.close(out)
                raise
            try:
                while rest:
                    rest = rest[os.write(out, rest) :]
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(out, end)  # no half a line left behind (a disk that filled up)
                raise
            finally:
                os.close(out)
    finally:
        os.close(fd)


def record_file(path: Path) -> None:
    """Record ``path``, a file that another library writes itself (TensorBoard's event files, whose names it chooses
    when it creates them), in its folder's manifest, so that ``--overwrite`` deletes it with the run; call it as soon as
    the file exists. A name that is a link, or not a plain file, is refused (:class:`RunFileError`)."""
    path = Path(path)
    fd = _folder_of(path)
    try:
        _check_name(fd, path)
        _record(fd, path.parent, path.name, "files")
    finally:
        os.close(fd)


def make_folder(path: Path) -> None:
    """Make the folder ``path`` and its missing parents (inside the run folder, through no link); each new folder is
    recorded in its parent's manifest and gets a manifest of its own, where the parent has one."""
    os.close(_open_folder(Path(path), make=True))


def start_manifest(folder: Path) -> None:
    """An empty manifest in ``folder`` (a new run folder): from now on, what is written there is recorded."""
    fd = _open_folder(Path(folder))
    try:
        _check_name(fd, Path(folder) / MANIFEST)
        _replace(fd, Path(folder) / MANIFEST, _manifest_bytes({"files": [], "folders": []}))
    finally:
        os.close(fd)


class Inventory(NamedTuple):
    """What the manifests under a folder list (:func:`inventory`)."""

    files: list[Path]  # the files that exist, the manifests and what killed writes left included, deepest first
    folders: list[Path]  # the folders the run made, deepest first
    foreign: list[tuple[Path, str]]  # everything else (path, what it is), in the order of the paths


def inventory(folder: Path) -> Inventory | None:
    """Every file and folder under ``folder`` that its manifest (and those of the folders it lists) lists, and every
    entry that none lists (a link is never listed: a run writes none); ``None`` where ``folder`` has no manifest."""
    folder = Path(folder)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        manifest = _read_manifest(fd, folder)
    finally:
        os.close(fd)
    if manifest is None:
        return None
    result = Inventory([], [], [])
    _take_stock(folder, manifest, result)
    depth = lambda p: (-len(p.parts), str(p))  # noqa: E731
    result.files.sort(key=depth)
    result.folders.sort(key=depth)
    result.foreign.sort(key=lambda entry: str(entry[0]))
    return result


def _take_stock(folder: Path, manifest: dict | None, result: Inventory) -> None:
    listed = {MANIFEST} | set(manifest["files"] if manifest else ())
    for name in sorted(os.listdir(folder)):
        path = folder / name
        mode = os.lstat(path).st_mode
        temporary = _TEMPORARY.fullmatch(name)
        if stat.S_ISLNK(mode):
            result.foreign.append((path, "a symbolic link"))
        elif stat.S_ISREG(mode) and (name in listed or (temporary is not None and temporary["name"] in listed)):
            result.files.append(path)
        elif stat.S_ISDIR(mode) and manifest is not None and name in manifest["folders"]:
            result.folders.append(path)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                inner = _read_manifest(fd, path)  # None: killed before its manifest was written (it holds nothing of the run's)
            finally:
                os.close(fd)
            _take_stock(path, inner, result)
        else:
            result.foreign.append((path, "a folder" if stat.S_ISDIR(mode) else "a file"))
