"""The MCP search tools: ``search_images`` (words, and filters, with any registered method that takes a text
query) and ``search_by_image`` (photos like a photo). Both answer with a
:class:`~pictrieve.mcp_server.schemas.SearchResult` built by :func:`~pictrieve.mcp_server.calls.answer_result`.
"""

import functools
from typing import TYPE_CHECKING, Annotated, Literal

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import Field

from pictrieve.mcp_server.calls import IMAGE_ARGUMENT, READ_ONLY, Text, answer_result, in_thread
from pictrieve.mcp_server.schemas import SearchResult
from pictrieve.mcp_server.service import MAX_K, PictrieveService
from pictrieve.vectorstore.search_request import MODEL_K

if TYPE_CHECKING:
    from pictrieve.mcp_server.server import PictrieveMCP


def add_search_tools(server: "PictrieveMCP", service: PictrieveService) -> None:
    """Register ``search_images`` and ``search_by_image`` over ``service`` on ``server``."""
    # search_images offers every registered method that takes a text query (as `pictrieve search --method`),
    # plugins included: the enum is the registry's when the server starts.
    offered = tuple(service.search_methods())
    plain = service.plain_method()
    SearchMethod = Literal[offered]  # type: ignore[valid-type]

    @server.tool(name="search_images", title="Search photos by description", annotations=READ_ONLY)
    async def search_images(
        ctx: Context,
        query: Annotated[Text, Field(description="What the photos should show, in words, e.g. 'two dogs playing in "
                                                 "the snow'; leave it empty to browse the photos that pass the "
                                                 "filters, newest first")] = "",
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many photos to return, best first")] = MODEL_K,
        method: Annotated[SearchMethod, Field(
            description=f"The retrieval method: '{plain}' (fast, the default) or another registered method that "
                        "takes a text query (slower; some need what the server was started with, e.g. a visualizer: "
                        "gallery_info's search_methods lists those this server can run)")] = plain,
        only_relevant: Annotated[bool, Field(description="Return only the photos that match well (maybe none); "
                                                         "default: the k closest, each marked relevant or not")] = False,
        after: Annotated[Text | None, Field(description="Only photos taken on or after this date, YYYY-MM-DD")] = None,
        before: Annotated[Text | None, Field(description="Only photos taken before this date, YYYY-MM-DD")] = None,
        near: Annotated[Text | None, Field(description="Only photos taken near 'LAT,LON' or a city ('Lisbon', "
                                                      "'Paris, FR'); see radius_km")] = None,
        radius_km: Annotated[float | None, Field(description="Kilometres around near, above 0 (default 10)")] = None,
        place: Annotated[Text | None, Field(description="Only photos whose city, region or country (name or code) "
                                                       "has these words, case aside (e.g. 'lisbon', 'Portugal', "
                                                       "'PT')")] = None,
        camera: Annotated[Text | None, Field(description="Only photos whose camera name, make or model has these "
                                                        "words, case aside (e.g. 'iphone', 'pixel 7')")] = None,
        folder: Annotated[Text | None, Field(description="Only photos in this folder or inside it (its full path), "
                                                        "or whose folder path holds these folder names")] = None,
        exif_dates_only: Annotated[bool, Field(description="With after/before: leave out photos without an EXIF "
                                                           "capture time (dated only by their file)")] = False,
        hybrid: Annotated[bool, Field(description="Match the photos' own words too (folder and file names, "
                                                  "captions, place, text in the photo), fused with what they show; "
                                                  "false: by what they show alone")] = True,
        collapse_duplicates: Annotated[bool, Field(
            description="Show each group of near-identical photos (resized, recompressed, cropped copies) once; "
                        "the hit's 'copies' lists the others")] = False,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Find photos in the user's gallery that match a description, or (filters alone) list those that pass the
        filters, newest first. Says whether any matches well ("No photo in the gallery matches ... well" when none
        does), or why none came back (a filter that left nothing, and what the gallery has), then each photo's
        gallery id, score, relevant and caption (JSON), then the photos themselves, best first."""
        filters = {name: value for name, value in dict(after=after, before=before, near=near, radius_km=radius_km,
                                                       place=place, camera=camera, folder=folder).items()
                   if value is not None}
        if exif_dates_only:
            filters["exif_dates_only"] = True
        answer = await in_thread(ctx, functools.partial(service.search, filters=filters, hybrid=hybrid,
                                                        collapse_duplicates=collapse_duplicates,
                                                        only_relevant=only_relevant),
                                 query, k, method, first=f"search_images: searching with {method}")
        return answer_result(method, answer)

    @server.tool(name="search_by_image", title="Search photos like a photo", annotations=READ_ONLY)
    async def search_by_image(
        ctx: Context,
        image: Annotated[str, Field(description=IMAGE_ARGUMENT)],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many photos to return, best first")] = MODEL_K,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Find the photos in the user's gallery that look most like a given photo (a gallery photo finds itself
        first). Returns ids, scores and captions (JSON), then the photos."""
        answer = await in_thread(ctx, service.search_by_image, image, k, first="search_by_image: reading the photo")
        return answer_result(service.image_method(), answer)
