"""Reading a ``.npz`` archive member by member: headers first, data only on demand.

``np.load`` on a ``.npz`` decompresses a whole member to look at it and ignores
``mmap_mode``. The pre-flight check (``python -m settings check``) must look at a
170 MB file in well under two seconds, so this module reads what a check needs:

* :func:`read_headers` -- every member's shape, dtype and order from its ``.npy``
  header (a few hundred bytes each, also for compressed members);
* :func:`read_array` -- one whole member; an uncompressed (``np.savez``) member is
  memory-mapped, not read;
* :func:`iter_rows` -- one member in row chunks of bounded size, so a scan for
  non-finite values never holds a decompressed copy of a large array.

The rules a dataset file must follow live in :mod:`hashdata.loaders` (they read
through this module too, so the loader and the check are one implementation).
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import numpy as np

#: bytes of one chunk :func:`iter_rows` yields (at least one row)
CHUNK_BYTES = 32 << 20

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile's structFileHeader


@dataclass(frozen=True)
class NpzMember:
    """One ``<name>.npy`` member of an archive, as its header describes it."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    compressed: bool
    zip_name: str

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def rows(self) -> int:
        """Length of the first axis (0 for a scalar)."""
        return int(self.shape[0]) if self.shape else 0


def npz_path(data_path: str, *, what: str) -> Path:
    """Return ``data-path`` as a path to an existing, readable file.

    Parameters
    ----------
    data_path : str
        The ``data-path`` config value.
    what : str
        What the file must hold, for the messages (e.g. the accepted layout).

    Raises
    ------
    ValueError
        Empty, a folder, or not readable.
    FileNotFoundError
        Nothing at that path.
    """
    if not str(data_path).strip():
        raise ValueError(
            f"dataset='npz' needs the config key `data-path` set to {what}; it is "
            "empty"
        )
    path = Path(str(data_path)).expanduser()
    if path.is_dir():
        raise ValueError(
            f"`data-path` {str(path)!r} is a folder; dataset='npz' needs {what}"
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"`data-path` {str(path)!r} does not exist; dataset='npz' needs {what}"
        )
    try:
        with path.open("rb"):
            pass
    except OSError as err:
        raise ValueError(f"`data-path` {str(path)!r} is not readable: {err}") from None
    return path


def read_headers(path: Path) -> dict[str, NpzMember]:
    """Every member's header, by array name (``labels`` for ``labels.npy``).

    Reads the zip directory and the first bytes of each member only.

    Raises
    ------
    ValueError
        Not a zip archive, a member that is not a ``.npy`` array, or an array of
        Python objects (pickles are never loaded).
    """
    where = f"`data-path` {str(path)!r}"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(
            f"{where} could not be read as a .npz archive (a zip of .npy arrays, as "
            f"numpy.savez writes): {err}"
        ) from None
    members: dict[str, NpzMember] = {}
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = info.filename[:-4] if info.filename.endswith(".npy") else ""
            try:
                with archive.open(info) as fh:
                    shape, fortran, dtype = _npy_header(fh)
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
                raise ValueError(
                    f"{where}: member {info.filename!r} is not a .npy array ({err}); "
                    "accepted: a .npz of numeric arrays, as numpy.savez writes"
                ) from None
            if not name:
                raise ValueError(
                    f"{where}: member {info.filename!r} is not named <array>.npy"
                )
            if dtype.hasobject:
                raise ValueError(
                    f"{where}: `{name}` holds Python objects (dtype {dtype}); "
                    "pickled objects are not accepted, store numeric arrays"
                )
            members[name] = NpzMember(
                name=name,
                shape=tuple(int(s) for s in shape),
                dtype=dtype,
                fortran_order=bool(fortran),
                compressed=info.compress_type != zipfile.ZIP_STORED,
                zip_name=info.filename,
            )
    return members


def read_array(path: Path, member: NpzMember) -> np.ndarray:
    """One whole member; memory-mapped (read-only) when stored uncompressed."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member.zip_name)
        if not member.compressed and member.shape and int(np.prod(member.shape)) > 0:
            offset = _data_offset(path, info)
            order: Literal["C", "F"] = "F" if member.fortran_order else "C"
            return np.memmap(
                path, dtype=member.dtype, mode="r", offset=offset,
                shape=member.shape, order=order,
            )
        with archive.open(info) as fh:
            return np.lib.format.read_array(fh, allow_pickle=False)


def iter_rows(
    path: Path, member: NpzMember, chunk_bytes: int | None = None
) -> Iterator[np.ndarray]:
    """Yield ``member`` as consecutive row blocks of about ``chunk_bytes`` each.

    ``chunk_bytes`` defaults to :data:`CHUNK_BYTES`. A Fortran-ordered member is
    yielded whole (its rows are not contiguous).
    """
    if chunk_bytes is None:
        chunk_bytes = CHUNK_BYTES
    if member.fortran_order or member.ndim == 0:
        yield read_array(path, member)
        return
    row_shape = member.shape[1:]
    row_bytes = max(1, int(np.prod(row_shape)) * member.dtype.itemsize)
    per_chunk = max(1, chunk_bytes // row_bytes)
    with zipfile.ZipFile(path) as archive, archive.open(member.zip_name) as fh:
        _npy_header(fh)
        left = member.rows
        while left > 0:
            rows = min(per_chunk, left)
            raw = _read_exactly(fh, rows * row_bytes)
            yield np.frombuffer(raw, dtype=member.dtype).reshape((rows, *row_shape))
            left -= rows


def _npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    raise ValueError(f".npy format version {version} is not supported (1.0, 2.0)")


def _read_exactly(fh: IO[bytes], size: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        block = fh.read(size)
        if not block:
            raise ValueError("the archive member ends early (truncated file)")
        parts.append(block)
        size -= len(block)
    return b"".join(parts)


def _data_offset(path: Path, info: zipfile.ZipInfo) -> int:
    """File offset of a stored member's array data (after both headers)."""
    with path.open("rb") as raw:
        raw.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
        name_len, extra_len = fields[-2], fields[-1]
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        raw.seek(start)
        _npy_header(raw)
        return raw.tell()
