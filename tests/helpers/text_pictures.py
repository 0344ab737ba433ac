"""Pictures with text in them, rendered here with a real TrueType font (matplotlib's bundled DejaVu Sans, which
every install of pictrieve has): a shop sign on a green wall and a phone screenshot of Wi-Fi settings."""

from __future__ import annotations

from pathlib import Path

import matplotlib
from PIL import Image, ImageDraw, ImageFont

FONTS = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
SIGN_WORDS = ("BAKERY", "open daily")
SCREENSHOT_LINES = ("Wi-Fi settings", "Network: HarborCafe", "Password: sunflower42", "Security: WPA2")


def font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONTS / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")), size)


def sign(path: Path, words: tuple[str, str] = SIGN_WORDS) -> Path:
    """A white sign with a red word and a black line under it, on a green wall (640x360 JPEG)."""
    picture = Image.new("RGB", (640, 360), (30, 90, 40))
    draw = ImageDraw.Draw(picture)
    draw.rectangle((60, 80, 580, 280), fill=(240, 240, 240))
    draw.text((100, 130), words[0], font=font(64, bold=True), fill=(200, 0, 0))
    draw.text((100, 210), words[1], font=font(40), fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.save(path, quality=92)
    return path


def screenshot(path: Path, lines: tuple[str, ...] = SCREENSHOT_LINES) -> Path:
    """A settings screen: black lines of 24 px text on white (800x500 PNG)."""
    picture = Image.new("RGB", (800, 500), "white")
    draw = ImageDraw.Draw(picture)
    for i, line in enumerate(lines):
        draw.text((40, 40 + 60 * i), line, font=font(24), fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.save(path)
    return path
