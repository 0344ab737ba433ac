"""How a hit is shown (``vectorstore/hits.py``): one JSON dict, one text line, one set of thumbnail blocks, the
same for the MCP server, the LangChain tools and the command line."""

from __future__ import annotations

import base64
import io

from PIL import Image

from pictrieve.vectorstore.hits import ImageHit, hit_json, hit_line, photo_blocks

FULL = ImageHit(id="a1", path="/p/a.jpg", score=0.876543, rank=1, captions=["a dog", "a pet"], relevant=True,
                keyword_match=True, copies=["/p/a-copy.jpg"],
                metadata={"taken_at": "2024-06-01T10:00:00", "taken_at_source": "exif", "place": "Lisbon, PT",
                          "camera": "Pixel 7", "photo_text": "EXIT"})


def test_hit_json_says_what_is_known_and_only_that():
    assert hit_json(FULL) == {"rank": 1, "id": "a1", "path": "/p/a.jpg", "score": 0.8765, "relevant": True,
                              "caption": "a dog", "keyword_match": True, "taken_at": "2024-06-01T10:00:00",
                              "date": "2024-06-01", "place": "Lisbon, PT", "camera": "Pixel 7", "photo_text": "EXIT",
                              "copies": ["/p/a-copy.jpg"]}
    bare = ImageHit(id="b", path="/p/b.jpg", score=0.5, rank=2)
    assert hit_json(bare) == {"rank": 2, "id": "b", "path": "/p/b.jpg", "score": 0.5, "relevant": None,
                              "caption": "", "keyword_match": False}
    assert hit_json(FULL.to_json()) == hit_json(FULL)  # a hit's JSON (from a checkpoint) reads the same
    by_file = bare.model_copy(update={"metadata": {"taken_at": "2024-06-01T10:00:00+01:00", "taken_at_source": "file"}})
    assert hit_json(by_file) == {**hit_json(bare), "file_date": "2024-06-01T10:00:00+01:00",
                                 "date": "2024-06-01 (file date)"}  # never a taken_at: a file's time is no capture time


def test_the_mcp_hit_schema_holds_every_field_of_hit_json():
    from pictrieve.mcp_server.schemas import Hit

    assert set(hit_json(FULL)) <= set(Hit.model_fields)
    assert Hit.model_validate(hit_json(FULL)).model_dump(exclude_defaults=True) == hit_json(FULL)


def test_hit_line():
    assert hit_line(FULL) == ("  1  0.877  /p/a.jpg  a dog  [2024-06-01  Lisbon, PT  Pixel 7]  [words]"
                              "  (+1 near-identical copy)")
    file_time = FULL.model_copy(update={"metadata": {"taken_at": "2024-06-01T10:00:00"}, "copies": [],
                                        "keyword_match": False, "captions": []})
    assert hit_line(file_time) == "  1  0.877  /p/a.jpg"  # a time of unknown source is not shown
    by_file = file_time.model_copy(update={"metadata": {"taken_at": "2024-06-01T10:00:00", "taken_at_source": "file"}})
    assert hit_line(by_file) == "  1  0.877  /p/a.jpg  [2024-06-01 (file date)]"  # marked as the file's
    assert hit_line(ImageHit(id="x", rank=12, score=0.1)) == " 12  0.100  x"  # no file: its id


def test_photo_blocks_label_each_photo_and_say_when_one_cannot_be_read(tmp_path):
    Image.new("RGB", (900, 600), (200, 30, 30)).save(tmp_path / "red.png")
    hits = [ImageHit(id="r", path=str(tmp_path / "red.png"), rank=1, captions=["a red wall"]),
            ImageHit(id="g", path=str(tmp_path / "gone.png"), rank=2)]
    blocks = photo_blocks(hits)
    assert [b["type"] for b in blocks] == ["text", "image", "text"]
    assert blocks[0]["text"] == "Photo 1 (id r): a red wall"
    assert blocks[2]["text"] == "Photo 2 (id g): the image file cannot be read"
    picture = Image.open(io.BytesIO(base64.b64decode(blocks[1]["base64"])))
    assert blocks[1]["mime_type"] == "image/jpeg" and picture.format == "JPEG" and picture.size == (512, 341)


def test_mcp_and_the_langchain_tools_show_the_same_photos(tmp_path):
    from pictrieve.mcp_server.calls import photo_content

    Image.new("RGB", (64, 48), (30, 200, 30)).save(tmp_path / "green.png")
    hits = [ImageHit(id="g", path=str(tmp_path / "green.png"), rank=1, captions=["grass"])]
    content = photo_content(hits)
    blocks = photo_blocks(hits)
    assert [(c.type, getattr(c, "text", None) or c.data) for c in content] == \
        [(b["type"], b.get("text") or b["base64"]) for b in blocks]
    assert content[1].mimeType == "image/jpeg"
