"""Make the README's screenshots of the web page: ``python docs/screenshots.py`` (writes docs/ui-*.png).

Everything is offline and real: the demo's bundled sample photos (scikit-image / scikit-learn) indexed
with the ``offline`` embedder, the offline chat model (SmolLM2-135M, greedy) for Chat, the SSD
detector, offline describer and extractive answerer for Ask with the ``local:`` pages of
examples/vsa-offline, and the
``exemplar:`` visualizer over the same sample photos with captions written here (so its guide
pictures are found photos, and the page says so), searching image-to-image with ``efficientnet-lite0``.
Steer uses a QC2 model trained here on those captions (BRISQUE quality, 20 epochs over 14 captions:
it shows the page, not QC2 at its best); if training fails, the screenshot shows the page's message.
The page is driven by headless Chromium (Debian's ``chromium``) through Playwright; each screenshot is
reduced to a 256-colour palette so the PNGs stay small.
Fixed inputs and paths keep Search and Visualize the same from run to run; the small language
models' wording (Chat, Steer, Ask) can vary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "examples" / "vsa-offline" / "pages"
VIEWPORT = {"width": 1000, "height": 640}
WORKDIR = Path(tempfile.gettempdir()) / "pictrieve-screenshots"
"""A fixed folder (emptied first), so the paths the page shows are the same on every run."""
IMAGE_EMBEDDER = "efficientnet-lite0"
"""VisRet searches image-to-image with the image-only embedder, as the README advises offline."""
# Our own short captions for the sample photos (the exemplar visualizer's reference collection).
CAPTIONS = {
    "astronaut.png": "an astronaut in a white space suit in front of a flag",
    "chelsea.png": "a ginger tabby cat looking to the side",
    "coffee.png": "a cup of coffee on a saucer seen from above",
    "rocket.jpg": "a rocket on the launch pad",
    "motorcycle_left.png": "a red motorcycle seen from the side",
    "hubble_deep_field.jpg": "galaxies and stars in the night sky",
    "camera.png": "a black and white photo of a man with a camera on a tripod",
    "coins.png": "old coins on a table",
    "brick.png": "a brick wall",
    "grass.png": "green grass",
    "moon.png": "the surface of the moon",
    "page.png": "a printed page of text",
    "china.jpg": "a temple with a tiled roof among trees",
    "flower.jpg": "a pink flower in close-up",
}


VIEWS = ("search", "chat", "steer", "visualize", "needle", "ask")


def build(workdir: Path, views: tuple[str, ...] = VIEWS):
    from pictrieve.cli.demo import copy_sample_photos
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.visualizers import create_visualizer
    from pictrieve.tools.models.vlm import create_region_captioner
    from pictrieve.ui.app import create_app
    from pictrieve.vectorstore.gallery import Gallery

    photos = copy_sample_photos(workdir / "photos")
    for photo in photos:  # captions as sidecar files: shown on the cards, and what QC2 learns from
        if photo.name in CAPTIONS:
            photo.with_suffix(".txt").write_text(CAPTIONS[photo.name] + "\n")
    pages = workdir / "pages"  # copied, so the source paths the page shows are the same in every checkout
    shutil.copytree(PAGES, pages)
    gallery = Gallery.open(workdir / "gallery", "offline")
    gallery.add([workdir / "photos"], embedders=["offline", IMAGE_EMBEDDER])
    if "steer" in views:
        train_qc2(gallery)
    reference = workdir / "reference"
    reference.mkdir()
    lines = [json.dumps({"image": str(p), "captions": [CAPTIONS[p.name]]}) for p in photos if p.name in CAPTIONS]
    (reference / "captions.jsonl").write_text("\n".join(lines) + "\n")
    llm = create_chat_model("offline", max_tokens=160, temperature=0.0)
    app = create_app(
        gallery, state_dir=workdir / "state",
        needs={"llm": llm, "captioner": "auto", "search": f"local:{pages}", "detector": "ssd",
               "vlm": create_region_captioner("offline"),
               "visualizers": create_visualizer(f"exemplar:{reference}", cache_dir=workdir / "exemplar")},
        settings={"visret": {"image_embedder": IMAGE_EMBEDDER}},
    )
    return app, workdir / "photos"


def train_qc2(gallery) -> None:
    """Annotate (BRISQUE, offline) and train a small QC2 model, so Steer has one; on failure Steer shows its message."""
    from pictrieve.cli.main import cli

    for args in (["quality", "annotate", "-g", str(gallery.location), "--scorer", "brisque"],
                 ["quality", "train", "-g", str(gallery.location), "--scorer", "brisque", "--epochs", "20"]):
        try:
            cli.main(args, standalone_mode=False)
        except Exception as exc:  # noqa: BLE001  (a screenshot of the page's message is still useful)
            print(f"QC2 not trained ({' '.join(args[:2])}: {exc}); the Steer screenshot shows the page's message")
            return


def serve(app):
    import uvicorn

    from pictrieve.cli.ui import free_port

    port = free_port("127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def save(page, path: Path) -> None:
    from PIL import Image

    page.wait_for_function("() => [...document.images].every(i => i.complete)")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    raw = path.with_suffix(".raw.png")
    page.screenshot(path=str(raw), full_page=True)
    with Image.open(raw) as shot:
        shot.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            path, optimize=True)
    raw.unlink()
    print(f"{path} ({path.stat().st_size // 1024} KiB)")


def shoot(url: str, photos: Path, out: Path, chromium: str, views: tuple[str, ...] = VIEWS) -> None:
    from playwright.sync_api import sync_playwright

    slow = 600_000
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_context(viewport=VIEWPORT).new_page()

        if "search" in views:
            page.goto(url)
            page.wait_for_function("() => document.getElementById('status').textContent.includes('images')")
            page.fill("#query", "a cup of coffee")
            page.click("#search-form button")
            page.wait_for_selector("#search-grid .card")
            save(page, out / "ui-search.png")
        if "chat" in views:
            page.goto(url + "/#chat")
            page.evaluate("localStorage.clear()")
            page.reload()
            page.fill("#chat-description", "a cat")
            page.click("#chat-start button")
            page.wait_for_selector("#chat-grid .card", timeout=slow)
            save(page, out / "ui-chat.png")
        if "steer" in views:
            page.goto(url + "/#steer")
            page.fill("#steer-query", "a cat")
            page.click("#steer-form button")
            page.wait_for_selector("#error:not([hidden]), #steer-grid .card", timeout=slow)
            save(page, out / "ui-steer.png")
        if "visualize" in views:
            page.goto(url + "/#visualize")
            page.fill("#visualize-query", "a cup of coffee")
            page.fill("#visualize-guides-count", "1")  # one caption of the 14 matches: more guides would add unrelated photos
            page.click("#visualize-form button[type=submit]")
            page.wait_for_selector("#visualize-grid .card", timeout=slow)
            save(page, out / "ui-visualize.png")
        if "needle" in views:
            # NEEDLE's whole loop on the page: reject the second guide, approve its replacement, mark the
            # last result as unwanted; the picture shows the trust weights learned from that mark.
            page.goto(url + "/#visualize")
            page.select_option("#visualize-method", "needle")
            page.fill("#visualize-query", "outer space: the moon, the stars, a rocket")  # four captions match
            page.fill("#visualize-guides-count", "2")
            page.click("#visualize-form button[type=submit]")
            page.wait_for_selector("#needle-guides-send:not([hidden])", timeout=slow)
            page.check("#visualize-guides .card[data-id=g2] input.needle-reject")
            page.click("#needle-guides-send")
            page.wait_for_selector("#visualize-guides .card[data-id=g3]", timeout=slow)
            page.click("#needle-guides-send")
            page.wait_for_selector("#needle-results-send:not([hidden])", timeout=slow)
            page.locator("#visualize-grid input.needle-irrelevant").last.check()  # the least similar one
            page.click("#needle-results-send")
            page.wait_for_function("() => document.getElementById('needle-results-send').hidden && "
                                   "!document.querySelector('#visualize-grid input') && "
                                   "document.querySelectorAll('#visualize-grid .card').length > 0", timeout=slow)
            save(page, out / "ui-needle.png")
        if "ask" in views:
            page.goto(url + "/#ask")
            page.set_input_files("#ask-photo", str(photos / "chelsea.png"))
            page.fill("#ask-question", "How many hours a day does an animal like this sleep?")
            page.click("#ask-form button[type=submit]")
            page.wait_for_function("() => document.getElementById('ask-answer').textContent.length > 0 || "
                                   "!document.getElementById('error').hidden", timeout=slow)
            save(page, out / "ui-ask.png")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="Folder for the PNGs (default: docs/).")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--only", action="append", choices=VIEWS, help="Make only this view's picture (repeatable).")
    args = parser.parse_args()
    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    os.environ["PICTRIEVE_PAGES_DB"] = str(WORKDIR / "pages-db")  # the local pages' index: not in the cache
    try:
        views = tuple(args.only or VIEWS)
        app, photos = build(WORKDIR, views)
        server, url = serve(app)
        try:
            shoot(url, photos, args.out, args.chromium, views)
        finally:
            server.should_exit = True
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)


if __name__ == "__main__":
    main()
