"""Keyed block hashes: what the warehouse stores of a prompt cannot be recomputed from a guess.

A block hash is an unkeyed chain of xxHash64 over token ids (``hashing.py``), so anyone holding
the warehouse could hash a guessed prompt and confirm it block by block. Every hash the
warehouse stores is therefore passed through a keyed pseudo-random function first:

    stored = BLAKE2b-64(key, h)        (RFC 7693, keyed, 8-byte digest; h as 8 bytes LE)

and an engine's own hash bytes (vLLM's KV events) through ``BLAKE2b-64(key, bytes)``. Equal
blocks still get equal stored hashes, chains stay chains, and events still match requests (all
go through one key); without the key no stored value can be produced from a guess.

The key is 16 to 64 bytes (BLAKE2b's key) read from a file, never written anywhere: the
warehouse records its *fingerprint* only, ``BLAKE2b-64(key, "prefixscope key fingerprint")``,
which says whether two ingests used one key and reveals nothing of it. Without
``--hash-key-file`` a key is made on first use in the user's config folder (mode 0600);
``--hash-key-file none`` stores plain hashes (fingerprint ``none``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from prefixscope import sql
from prefixscope.ingest.blake2b64 import DIGEST, keyed_words, state_after_key

#: The fingerprint of plain (unkeyed) hashes: rows written with ``--hash-key-file none``, and
#: every row written before keys existed.
PLAIN = "none"
#: A settings value that stands for the user's own key (``resolve_key(None)``), resolved where
#: it is used: the default of every ingest, so that plain hashes are only ever asked for.
USER_KEY = "user"
#: BLAKE2b's key length bounds, in bytes; a key file made here holds KEY_BYTES random bytes.
MIN_KEY, MAX_KEY, KEY_BYTES = 16, 64, 32
_FINGERPRINT_MESSAGE = b"prefixscope key fingerprint"


@dataclass(frozen=True)
class HashKey:
    """A key for the stored hashes; ``source`` says where it came from (a path), for messages.
    Its bytes are never printed: ``repr`` shows the fingerprint."""

    key: bytes = field(repr=False)
    source: str = ""

    def __post_init__(self) -> None:
        if not MIN_KEY <= len(self.key) <= MAX_KEY:
            raise ValueError(
                f"a hash key is {MIN_KEY} to {MAX_KEY} bytes, not {len(self.key)} — give a file "
                f"of {KEY_BYTES} random bytes (head -c {KEY_BYTES} /dev/urandom > FILE)"
            )

    def __repr__(self) -> str:
        return f"HashKey(fingerprint={self.fingerprint!r})"

    @cached_property
    def fingerprint(self) -> str:
        """16 hex digits that tell keys apart and reveal nothing of them."""
        return hashlib.blake2b(_FINGERPRINT_MESSAGE, key=self.key, digest_size=DIGEST).hexdigest()

    @cached_property
    def _state(self) -> np.ndarray:
        return state_after_key(self.key)

    def hashes(self, values: np.ndarray) -> np.ndarray:
        """Each uint64 hash keyed: ``BLAKE2b-64(key, value as 8 bytes LE)`` as a uint64 LE."""
        flat = np.ascontiguousarray(values, dtype=np.uint64).ravel()
        return keyed_words(flat, self._state).reshape(np.shape(values))

    def blob(self, data: bytes) -> bytes:
        """An engine's hash bytes keyed: ``BLAKE2b-64(key, data)``, 8 bytes."""
        return hashlib.blake2b(data, key=self.key, digest_size=DIGEST).digest()


def keyed_lists(column: pa.Array | pa.ChunkedArray, key: HashKey) -> pa.Array:
    """A ``list<uint64>`` column with every hash keyed, its lists (and nulls) as they were."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.offset:  # a slice: its own copy, offsets from 0
        arr = pa.concat_arrays([arr])
    keyed = key.hashes(arr.values.to_numpy(zero_copy_only=False))
    return pa.ListArray.from_arrays(
        arr.offsets, pa.array(keyed, pa.uint64()), type=arr.type, mask=arr.is_null()
    )


def fingerprint_of(key: HashKey | str | None) -> str:
    """What the warehouse records of a key: its fingerprint, or :data:`PLAIN`
    (:data:`USER_KEY`: the user's key, resolved)."""
    key = resolved(key)
    return PLAIN if key is None else key.fingerprint


def resolved(key: HashKey | str | None) -> HashKey | None:
    """A settings value as a key: :data:`USER_KEY` is the user's own (made on first use)."""
    if key == USER_KEY:
        return resolve_key(None)
    assert key is None or isinstance(key, HashKey), key
    return key


def refuse_other_key(con: Any, key: HashKey | str | None, replaced: list[str]) -> None:
    """Refuse, in one line, to add rows keyed otherwise than the warehouse's (``con``, in the
    ingest's transaction; ``replaced``: the file ids this ingest replaces, whose key no longer
    counts): one warehouse, one key, or no equal blocks would match across its rows."""
    mine = fingerprint_of(key)
    found = [
        fp
        for (fp,) in con.execute(sql.load("ingest/hash_keys"), {"replaced": replaced}).fetchall()
        if fp != mine
    ]
    if not found:
        return
    theirs = "plain (unkeyed)" if found[0] == PLAIN else f"keyed with key {found[0]}"
    ours = "plain (--hash-key-file none)" if mine == PLAIN else f"keyed with key {mine}"
    give = "none" if found[0] == PLAIN else f"the file of key {found[0]}"
    raise ValueError(
        f"this warehouse's block hashes are {theirs}, and this ingest's would be {ours}: they "
        f"would never match — give --hash-key-file {give}, or a new warehouse. Nothing was "
        "written"
    )


def config_dir() -> Path:
    """The user's prefixscope config folder: ``$PREFIXSCOPE_CONFIG_DIR``, else
    ``$XDG_CONFIG_HOME/prefixscope``, else ``~/.config/prefixscope``."""
    own = os.environ.get("PREFIXSCOPE_CONFIG_DIR")
    if own:
        return Path(own)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "prefixscope"


def default_key_path() -> Path:
    return config_dir() / "hash.key"


def resolve_key(spec: str | None) -> HashKey | None:
    """The key ``--hash-key-file`` names: ``none`` (plain hashes: None), a file, or (None given)
    the user's default key, made on first use with its path printed once to stderr."""
    if spec is not None and spec.strip().lower() == PLAIN:
        return None
    if spec is not None:
        return read_key(Path(spec))
    path = default_key_path()
    if not path.exists():
        _make_key(path)
    return read_key(path)


def read_key(path: Path) -> HashKey:
    """A key file's key: its bytes (16 to 64), or the bytes its hex text spells (32 to 128 hex
    digits, as ``openssl rand -hex 32`` writes). ValueError in one line otherwise."""
    what = f"the hash key file {path}"
    try:
        info = path.stat()
    except OSError as exc:
        raise ValueError(
            f"{what} cannot be read ({exc.strerror}) — give a key file, or none"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"{what} is not a regular file — give a file of {KEY_BYTES} random bytes"
        )
    if info.st_size > 4 * MAX_KEY:
        raise ValueError(f"{what} is {info.st_size:,} bytes: a key is at most {MAX_KEY}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{what} cannot be read ({exc.strerror})") from None
    text = data.strip()
    if 2 * MIN_KEY <= len(text) <= 2 * MAX_KEY and len(text) % 2 == 0:
        with contextlib.suppress(UnicodeDecodeError, ValueError):  # not hex: the bytes are the key
            data = bytes.fromhex(text.decode("ascii"))
    try:
        return HashKey(data, str(path))
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _make_key(path: Path) -> None:
    """A new random key at ``path``, readable by its owner only, written whole before it
    appears (a temporary file linked into place), so a process that reads it meanwhile never
    sees half a key; a key another process made first is kept."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
    except OSError as exc:
        raise ValueError(
            f"cannot make a hash key at {path} ({exc.strerror}) — give --hash-key-file FILE, or "
            "none for plain hashes"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    print(
        f"made a key for block hashes at {path} (mode 0600): keep it; every later ingest into "
        "the same warehouse needs it",
        file=sys.stderr,
    )
