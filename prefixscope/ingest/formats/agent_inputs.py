"""The conversations of one agent-trace input: a JSON file (plain or gzip), a directory of them,
or a ``.tar`` (plain, gzip, bzip2, xz) or ``.zip`` archive of them.

In a directory or an archive, a conversation is a regular file whose name ends in ``.json`` or
``.json.gz`` (any case); hidden files, anything under a hidden folder or ``__MACOSX``, and
other files (a README) are not conversations. Directories are walked without following links
to folders. Each conversation is read whole, at most :data:`MAX_CONVERSATION_BYTES`; one that
cannot be read (a corrupt member, one too large) is a :class:`Member` with its problem, for the
format to reject; an archive that ends early keeps every member read before the break and
says so (:attr:`Conversations.truncated`).

The input's identity (``file_id``) is the SHA-256 of each conversation's name and bytes, in
the order they are read; a single file's is that of its bytes, as for every other format.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import lzma
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated

import msgspec

from prefixscope.ingest.formats.base import MAX_BLOCK_SIZE, IngestOptions
from prefixscope.ingest.lines import GZIP_MAGIC, FileReadState

#: The most bytes one conversation may hold, decompressed (the largest published one: 3.3 MB).
MAX_CONVERSATION_BYTES = 256 << 20
_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


@dataclass(frozen=True)
class Member:
    """One conversation as read: its bytes, or the reject reason and message of why they could
    not be read (``unreadable_conversation``, ``conversation_too_large``, ``truncated_file``)."""

    name: str
    data: bytes | None
    reason: str | None = None
    problem: str | None = None


@dataclass
class Conversations:
    """An input's conversation names (sorted: the order :mod:`arrival` places them in) and,
    once :meth:`read` is exhausted, whether it ended early."""

    path: Path
    names: list[str]
    kind: str  # file, directory, tar, zip
    # Why the archive's index stops early (members after the break are unknown), else None.
    truncated: str | None = None
    # Whether a member read from a truncated archive already carries the break (truncated_file).
    cut: bool = False

    def read(self, state: FileReadState) -> Iterator[Member]:
        """Each conversation, in the input's own order (a directory's and a zip's: by name; a
        tar's: as archived); ``state`` takes their bytes."""
        if self.kind == "file":
            yield self._single(state)
        elif self.kind == "directory":
            for name in self.names:
                yield _counted(_bounded_file(self.path / name, name), state)
        elif self.kind == "zip":
            yield from self._zip(state)
        else:
            yield from self._tar(state)

    def _single(self, state: FileReadState) -> Member:
        try:
            with self.path.open("rb") as f:
                raw = f.read(MAX_CONVERSATION_BYTES + 1)
        except OSError as exc:
            return _unreadable(self.names[0], f"the file cannot be read ({_why(exc)})")
        state.sha256.update(raw)  # a lone file's identity: its bytes, as every format's
        state.bytes_read += len(raw)
        return _unpacked(self.names[0], raw)

    def _zip(self, state: FileReadState) -> Iterator[Member]:
        if not self.names:
            return  # an index that cannot be read holds nothing to read (``truncated`` says why)
        with zipfile.ZipFile(self.path) as archive:
            # every member, two of one name included, in the order of their names
            infos = sorted(
                (i for i in archive.infolist() if not i.is_dir() and _is_conversation(i.filename)),
                key=lambda i: i.filename,
            )
            for info in infos:
                name = info.filename
                if info.file_size > MAX_CONVERSATION_BYTES:
                    yield _too_large(name)
                    continue
                try:
                    with archive.open(info) as f:
                        data = f.read(MAX_CONVERSATION_BYTES + 1)
                except (
                    zipfile.BadZipFile,
                    RuntimeError,
                    NotImplementedError,
                    *_ARCHIVE_ERRORS,
                ) as exc:
                    yield _unreadable(name, f"the archive member cannot be read ({_why(exc)})")
                    continue
                yield _counted(_unpacked(name, data), state)

    def _tar(self, state: FileReadState) -> Iterator[Member]:
        """Read as a stream, once through: a compressed archive never seeks back."""
        name = "(the archive)"
        try:
            with tarfile.open(self.path, "r|*") as archive:
                for info in archive:
                    if not (info.isfile() and _is_conversation(info.name)):
                        continue
                    name = info.name
                    f = archive.extractfile(info)
                    data = f.read(MAX_CONVERSATION_BYTES + 1) if f is not None else b""
                    yield _counted(_unpacked(name, data), state)
                    name = f"(after {name})"
        except _ARCHIVE_ERRORS as exc:
            self.cut = True
            why = f"the archive ends early or is corrupt ({_why(exc)})"
            yield Member(name, None, "truncated_file", why)


def open_conversations(path: Path) -> Conversations:
    """What ``path`` holds, its conversations named (nothing read yet but an archive's index)."""
    if path.is_dir():
        return Conversations(path, _walk(path), "directory")
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = [i.filename for i in archive.infolist() if not i.is_dir()]
        except (zipfile.BadZipFile, zipfile.LargeZipFile, *_ARCHIVE_ERRORS) as exc:
            why = f"the zip archive's index cannot be read ({_why(exc)})"
            return Conversations(path, [], "zip", why)
        return Conversations(path, sorted(n for n in names if _is_conversation(n)), "zip")
    if _is_tar(path):
        names, problem = _tar_names(path)
        return Conversations(path, sorted(names), "tar", problem)
    return Conversations(path, [path.name], "file")


def _walk(root: Path) -> list[str]:
    names = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        for f in files:
            full = Path(folder) / f
            rel = full.relative_to(root).as_posix()
            try:
                regular = stat.S_ISREG(full.stat().st_mode)
            except OSError:
                regular = False  # a dangling link: not a conversation
            if regular and _is_conversation(rel):
                names.append(rel)
    return sorted(names)


def _is_conversation(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(parts) and not any(_hidden(p) for p in parts) and name.lower().endswith(_SUFFIXES)


def _hidden(part: str) -> bool:
    return part.startswith(".") or part == "__MACOSX"


def _is_tar(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except _ARCHIVE_ERRORS:
        return False


def _tar_names(path: Path) -> tuple[list[str], str | None]:
    """The conversations an archive holds before any break in it, and the break (a first pass
    through the stream, reading headers only)."""
    names: list[str] = []
    try:
        with tarfile.open(path, "r|*") as archive:
            for info in archive:
                if info.isfile() and _is_conversation(info.name):
                    names.append(info.name)
    except _ARCHIVE_ERRORS as exc:
        return names, f"the archive ends early or is corrupt ({_why(exc)})"
    return names, _tar_cut(path)


#: The decompressors of a tar's stream, by its first bytes (plain tar: none).
_CODECS = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


def _tar_cut(path: Path) -> str | None:
    """Why a tar stream that tarfile read to its end without complaint is cut short, or None.
    tarfile stops quietly at a header cut short, so the stream is checked itself: a compressed
    one must reach its end-of-stream marker, and every tar ends with (at least) two zero
    blocks."""
    with path.open("rb") as raw:
        head = raw.read(6)
    opener = next((o for magic, o in _CODECS if head.startswith(magic)), None)
    tail = b""
    try:
        with (opener(path, "rb") if opener else path.open("rb")) as stream:
            while chunk := stream.read(1 << 20):
                tail = (tail + chunk)[-1024:]
    except (EOFError, OSError, lzma.LZMAError, zlib.error) as exc:
        return f"the archive ends early or is corrupt ({_why(exc)})"
    if len(tail) < 1024 or tail.strip(b"\x00"):
        return "the archive ends early (no end-of-archive blocks)"
    return None


def _bounded_file(path: Path, name: str) -> Member:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CONVERSATION_BYTES + 1)
    except OSError as exc:
        return _unreadable(name, f"the file cannot be read ({_why(exc)})")
    return _unpacked(name, data)


def _unpacked(name: str, data: bytes) -> Member:
    """``data`` decompressed when it is gzip; too large or corrupt: a member with its problem."""
    if data[:2] == GZIP_MAGIC:
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = d.decompress(data, MAX_CONVERSATION_BYTES + 1)
            if not d.eof and len(data) <= MAX_CONVERSATION_BYTES:
                raise EOFError("the gzip stream ends early")
        except (zlib.error, EOFError, gzip.BadGzipFile) as exc:
            return _unreadable(name, f"the gzip stream cannot be read ({_why(exc)})")
    if len(data) > MAX_CONVERSATION_BYTES:
        return _too_large(name)
    return Member(name, data)


def _counted(member: Member, state: FileReadState) -> Member:
    if member.data is not None:
        encoded = member.name.encode("utf-8", "surrogateescape")
        state.sha256.update(len(encoded).to_bytes(8, "little") + encoded)
        state.sha256.update(len(member.data).to_bytes(8, "little") + member.data)
        state.bytes_read += len(member.data)
    return member


def _too_large(name: str) -> Member:
    why = f"the conversation is over {MAX_CONVERSATION_BYTES >> 20} MiB"
    return Member(name, None, "conversation_too_large", why)


def _unreadable(name: str, why: str) -> Member:
    return Member(name, None, "unreadable_conversation", why)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


def own_settings(path: Path, options: IngestOptions) -> IngestOptions:
    """``options`` with the first readable conversation's ``block_size`` (a positive integer)
    where ``--block-size`` says none: the ingest's block size, a conversation of another one
    being regrouped to it when it divides it (``agent.py``)."""
    if options.block_size is not None:
        return options
    try:
        conversations = open_conversations(path)
        for member in conversations.read(FileReadState()):
            if member.data is None:
                continue
            try:
                size = msgspec.json.decode(member.data, type=_BlockSize).block_size
            except (msgspec.DecodeError, RecursionError):
                continue  # for the rules to judge
            return dataclasses.replace(options, block_size=size)
    except _ARCHIVE_ERRORS:
        pass  # the read proper says what is wrong
    return options


class _BlockSize(msgspec.Struct):
    block_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BLOCK_SIZE)]


def placement(paths: list[Path]) -> dict[Path, tuple[int, int]]:
    """Each input's first conversation's place among every conversation of the command (the
    inputs in their order, each one's conversations by name), and how many there are: so that
    ``--arrival`` places the conversations of several inputs as one population, not each
    input's from the same draws."""
    counts = []
    for path in paths:
        try:
            counts.append(len(open_conversations(path).names))
        except _ARCHIVE_ERRORS:
            counts.append(0)  # the read proper says what is wrong
    firsts = [sum(counts[:i]) for i in range(len(counts))]
    return {p: (f, sum(counts)) for p, f in zip(paths, firsts, strict=True)}
