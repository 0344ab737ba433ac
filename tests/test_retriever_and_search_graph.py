import pytest

from pictrieve.graphs.search import build_search_graph
from pictrieve.vectorstore.gallery import Gallery
from pictrieve.vectorstore.retriever import GalleryRetriever


@pytest.fixture
def gallery(tmp_path, photo_folder, tiny_clip_embedder):
    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    return gallery


def test_retriever_returns_documents_with_paths_and_scores(gallery):
    docs = GalleryRetriever(gallery=gallery, k=3).invoke("a red square")
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3]
    expected = gallery.search_text("a red square", k=3, hybrid=True)
    assert [d.metadata["path"] for d in docs] == [h.path for h in expected]
    # Hybrid by default: the photo captioned "a red square" comes first, marked as matched by its words.
    assert docs[0].metadata["path"].endswith("img0.png") and docs[0].metadata["keyword_match"]
    vectors_alone = gallery.search_text("a red square", k=3)
    for off in (GalleryRetriever(gallery=gallery, k=3, hybrid=False).invoke("a red square"),
                GalleryRetriever(gallery=gallery, k=3).invoke("a red square", hybrid=False)):
        assert [d.metadata["path"] for d in off] == [h.path for h in vectors_alone]
        assert not any(d.metadata["keyword_match"] for d in off)
    captioned = [d for d in GalleryRetriever(gallery=gallery, k=6).invoke("x") if d.metadata["path"].endswith("img0.png")]
    assert captioned[0].page_content == "a red square"


def test_search_graph_by_text_and_by_image(gallery, photo_folder):
    graph = build_search_graph(gallery)
    by_text = graph.invoke({"query": "a red square"}, context={"k": 2})
    assert [h.id for h in by_text["hits"]] == [h.id for h in gallery.search_text("a red square", k=2, hybrid=True)]
    assert by_text["hits"][0].keyword_match
    alone = graph.invoke({"query": "a red square", "hybrid": False}, context={"k": 2})
    assert [h.id for h in alone["hits"]] == [h.id for h in gallery.search_text("a red square", k=2)]
    with pytest.raises(ValueError, match="^hybrid: 'no' is not accepted; it takes true or false"):
        graph.invoke({"query": "a red square", "hybrid": "no"})
    target = str(photo_folder / "b" / "img5.jpg")
    by_image = graph.invoke({"image": target}, context={"k": 1})
    assert by_image["hits"][0].path == target
    with pytest.raises(ValueError, match="it takes words saying what to find, an image, or filters to browse by"):
        graph.invoke({})
    with pytest.raises(ValueError, match="k must be a whole number"):
        graph.invoke({"query": "a red square"}, context={"k": 0})
    with pytest.raises(TypeError, match="top_k"):
        graph.invoke({"query": "a red square"}, context={"top_k": 3})
