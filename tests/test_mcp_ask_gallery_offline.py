"""``ask_gallery`` over MCP with the offline default writes no answer (issue 37, item 4).

The offline chat model (SmolLM2-135M) answered "what is the total on the receipt?" with "The total on the receipt
is 3." (the receipt says 42.50). With the offline default the server now quotes the photos' own words (their
captions, the text read in them) or says that none answers and that a capable --llm writes an answer; it never
loads the chat model. The server is the real ``pictrieve mcp`` over stdio with the official client, over a gallery
of three photos (tiny random CLIP: the ranking means nothing, so every photo is read), one of them a receipt whose
photo text is stored as the OCR would store it.
"""

from __future__ import annotations

import pytest
from PIL import Image

from helpers.mcp import stdio_session

pytestmark = pytest.mark.server

RECEIPT_TEXT = "CORNER MARKET\nMILK 1.20\nBREAD 2.30\nTOTAL\n42.50\nTHANK YOU"
CAPTIONS = {"receipt": "a paper receipt on a kitchen table", "dog": "a white dog runs through the snow",
            "boat": "a red boat on a calm lake"}


@pytest.fixture(scope="module")
def receipt_gallery(tmp_path_factory, tiny_clip_name):
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("ask-gallery")
    photos = root / "photos"
    photos.mkdir()
    for i, (name, caption) in enumerate(CAPTIONS.items()):
        Image.new("RGB", (64, 48), (40 * i, 90, 200 - 40 * i)).save(photos / f"{name}.jpg")
        (photos / f"{name}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(photos, progress=False)
    receipt = next(item.id for item in gallery.items() if item.captions == [CAPTIONS["receipt"]])
    gallery.update_metadata([receipt], [{"photo_text": RECEIPT_TEXT}])
    return root, receipt


def words_of_photos(hits) -> str:
    return "\n".join(f"{h.get('caption', '')}\n{h.get('photo_text', '')}" for h in hits)


async def test_ask_gallery_with_the_offline_default_quotes_the_photos_and_writes_nothing(receipt_gallery):
    root, receipt = receipt_gallery
    steps = []

    async def on_progress(step, total, message):
        steps.append(message)

    async with stdio_session(["-g", str(root / "gallery"), "--state-dir", str(root / "state")]) as session:
        total = await session.call_tool("ask_gallery", {"question": "what is the total on the receipt?", "k": 3},
                                        progress_callback=on_progress)
        colour = await session.call_tool("ask_gallery", {"question": "what colour is the dog in the snow?", "k": 3})
        nothing = await session.call_tool("ask_gallery", {"question": "who is the bride's mother?", "k": 3})
    for result in (total, colour, nothing):
        assert not result.isError, result.content
        assert result.structuredContent["answerer"] == "extractive", result.structuredContent
    found = total.structuredContent
    # the receipt's own text, quoted and named by its picture; never a written sentence about it
    picture = [h["id"] for h in found["hits"]].index(receipt) + 1
    assert found["answer"].startswith(f'Picture {picture}\'s text reads "'), found["answer"]
    assert "42.50" in found["answer"] and "TOTAL" in found["answer"]
    quoted = found["answer"].split('"')[1]
    assert quoted in words_of_photos(found["hits"]).replace("\n42.50", " 42.50")  # two OCR lines, quoted together
    assert not any("chat model" in step and "loading" in step for step in steps), steps  # SmolLM2 never loaded
    said = colour.structuredContent["answer"]
    assert '"a white dog runs through the snow"' in said and said.startswith("Picture "), said
    # nothing of the photos answers: no answer is written, and the reply says who would write one
    assert nothing.structuredContent["answer"].startswith("None of these photos' captions or text answers it. "
                                                          "No answer is written"), nothing.structuredContent
    assert "--llm" in nothing.structuredContent["answer"] and len(nothing.structuredContent["hits"]) == 3
