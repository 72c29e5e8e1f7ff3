"""Render an HTML file to PNG with headless Chromium and check the image is not blank.

    python scripts/render_html.py out/report.html out/report.png [--width 1300 --height 4000]

prints {"width":..,"height":..,"distinct_colours":..,"non_white_fraction":..}. The PNG is
decoded with Pillow (the dev extra). Chromium runs with networking and background services
off and a throw-away profile directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

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
WHITE = (255, 255, 255)


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


def png_stats(png: Path) -> dict[str, float]:
    """Size, number of distinct colours and the share of pixels that are not white."""
    with Image.open(png) as image:
        rgb = image.convert("RGB")  # alpha ignored: Chromium's screenshots are opaque
    width, height = rgb.size
    colours = rgb.getcolors(maxcolors=width * height) or []
    white = sum(count for count, colour in colours if colour == WHITE)
    return {
        "width": width,
        "height": height,
        "distinct_colours": len(colours),
        "non_white_fraction": round((width * height - white) / (width * height), 4),
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
