"""Render an HTML file to PNG with headless Chromium and check the image is not blank.

    python scripts/render_html.py out/report.html out/report.png [--width 1300 --height 4000]

prints {"width":..,"height":..,"distinct_colours":..,"non_white_fraction":..}. The PNG is
decoded with zlib only (no Pillow), so the check runs wherever Chromium does. Chromium runs
with networking and background services off and a throw-away profile directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render_png(
    html: Path, png: Path, width: int = 1300, height: int = 4000, scale: float = 1.0
) -> None:
    """Screenshot ``html`` (a local file) at ``width`` x ``height`` CSS pixels."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium not found (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        cmd = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--force-device-scale-factor={scale}",
            f"--screenshot={png.absolute()}",
            html.absolute().as_uri(),
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {png}")


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw pixel rows) of an 8-bit RGB/RGBA PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    if depth != 8 or colour not in (2, 6):
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour})")
    bpp = 3 if colour == 2 else 4
    return width, height, bpp, _unfilter(zlib.decompress(bytes(idat)), width, height, bpp)


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> bytes:
    stride = width * bpp
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                row[i] = (row[i] + row[i - bpp]) & 0xFF
        elif kind == 2:
            row = bytearray((a + b) & 0xFF for a, b in zip(row, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = row[i - bpp] if i >= bpp else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = row[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                row[i] = (row[i] + pred) & 0xFF
        out += row
        prev = row
    return bytes(out)


def png_stats(png: Path) -> dict[str, float]:
    """Size, number of distinct colours and the share of pixels that are not white."""
    width, height, bpp, pixels = decode_png(png.read_bytes())
    colours: set[bytes] = set()
    non_white = 0
    for i in range(0, len(pixels), bpp):
        px = pixels[i : i + 3]
        colours.add(px)
        if px != b"\xff\xff\xff":
            non_white += 1
    return {
        "width": width,
        "height": height,
        "distinct_colours": len(colours),
        "non_white_fraction": round(non_white / (width * height), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=4000)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    render_png(args.html, args.png, args.width, args.height, args.scale)
    print(json.dumps(png_stats(args.png)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
