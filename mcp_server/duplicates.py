"""The MCP ``find_duplicates`` tool: the groups of near-identical photos ``pictrieve duplicates`` lists.

Read-only, and it loads no model: the groups come from the perceptual hashes and vectors stored at index time
(:func:`~pictrieve.vectorstore.duplicates.find_duplicates`). Its result is structured (groups of ids and
paths, the photo to keep first), and the photos come as thumbnails only when the caller asks (``thumbnails``),
at most :data:`MAX_THUMBNAILS` of them, so an agent that only tidies a list does not pay for pictures.
Registered by :func:`add_duplicates_tool` on the server :func:`~pictrieve.mcp_server.server.create_server` makes;
the work runs in a worker thread, and a bad argument is one ``isError`` line, as for every other tool. The report
is kept until the gallery is written to, and while another call computes one, a call that needs a new one is one
``isError`` line at once (:func:`~pictrieve.vectorstore.duplicates.duplicate_report`).
"""

import base64
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from pictrieve.errors import PictrieveError
from pictrieve.mcp_server.calls import in_thread, result
from pictrieve.vectorstore.duplicates import (CLOSE_DISTANCE, CLOSE_MIN_COSINE, DEFAULT_MAX_DISTANCE, DEFAULT_MIN_COSINE,
                                              duplicate_report)

if TYPE_CHECKING:
    from pictrieve.mcp_server.server import PictrieveMCP

MAX_GROUPS = 100
"""Most groups one call returns (``total_groups`` says how many there are)."""
MAX_THUMBNAILS = 20
"""Most thumbnails one call sends (as many as a search's photos), group after group."""


class DuplicateGroup(BaseModel):
    """Photos that are near-identical copies of one another."""

    ids: list[str] = Field(description="Gallery ids, the one to keep first (the most pixels, then the largest file)")
    paths: list[str] = Field(description="Their files on the server, in the same order")
    min_cosine: float = Field(description="The weakest embedding similarity that joined the group")
    max_distance: int = Field(description="The largest perceptual-hash distance (bits of 64) within the group")


class DuplicatesResult(BaseModel):
    summary: str = Field(description="In words: how many groups and copies, among how many photos")
    groups: list[DuplicateGroup] = Field(description="The groups, largest first (at most `limit` of them)")
    total_groups: int = Field(description="How many groups the gallery has in all")
    compared: int = Field(description="Photos compared (those with a perceptual hash)")
    unhashed: int = Field(description="Photos indexed before hashes were stored, not compared (the next "
                                      "`pictrieve index` adds their hashes)")


def duplicates_result(gallery: Any, *, limit: int, max_distance: int, min_cosine: float) -> DuplicatesResult:
    """The gallery's near-duplicate groups, the first ``limit`` of them (blocking: reads every record's hash, unless
    the report of the gallery as it is now was kept; :class:`~pictrieve.vectorstore.duplicates.DuplicatesBusy` while
    another call computes one)."""
    found = duplicate_report(gallery, max_distance=max_distance, min_cosine=min_cosine)
    copies = sum(len(group.ids) - 1 for group in found.groups)
    summary = (f"{len(found.groups)} groups of near-identical photos ({copies} copies) among {found.compared} photos"
               + (f"; showing the first {limit}" if len(found.groups) > limit else ""))
    if found.unhashed:
        summary += (f"; {found.unhashed} photos have no perceptual hash yet and were not compared (indexing the "
                    "gallery again adds them, without embedding)")
    return DuplicatesResult(summary=summary, groups=[DuplicateGroup(**group.to_dict()) for group in found.groups[:limit]],
                            total_groups=len(found.groups), compared=found.compared, unhashed=found.unhashed)


def group_thumbnails(groups: list[DuplicateGroup], most: int = MAX_THUMBNAILS) -> list[Any]:
    """Each group's photos as MCP content: a ``Group g, photo n (id ...)`` line and its JPEG thumbnail (a line
    saying so when the file cannot be read), at most ``most`` pictures in all."""
    from pictrieve.tools.core.thumbnails import jpeg_thumbnail

    blocks: list[Any] = []
    sent = 0
    for number, group in enumerate(groups, 1):
        for place, (id_, path) in enumerate(zip(group.ids, group.paths), 1):
            if sent >= most:
                blocks.append(TextContent(type="text", text=f"(thumbnails stop at {most} photos)"))
                return blocks
            label = f"Group {number}, photo {place} (id {id_})"
            try:
                data = jpeg_thumbnail(path)
            except (PictrieveError, OSError):
                blocks.append(TextContent(type="text", text=f"{label} (the image file cannot be read)"))
                continue
            blocks.append(TextContent(type="text", text=label))
            blocks.append(ImageContent(type="image", data=base64.b64encode(data).decode("ascii"), mimeType="image/jpeg"))
            sent += 1
    return blocks


def add_duplicates_tool(server: "PictrieveMCP", gallery: Any) -> None:
    """Register ``find_duplicates`` over ``gallery`` on ``server``."""
    @server.tool(name="find_duplicates", title="Find near-identical photos",
                 annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
    async def find_duplicates_tool(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=MAX_GROUPS, description="How many groups to return, largest "
                                                                      "first")] = 20,
        thumbnails: Annotated[bool, Field(description=f"Also send the grouped photos as thumbnails (at most "
                                                      f"{MAX_THUMBNAILS})")] = False,
        max_distance: Annotated[int, Field(ge=0, le=16, description="Perceptual-hash bits (of 64) two "
                                                                    "near-duplicates may differ in")] = DEFAULT_MAX_DISTANCE,
        min_cosine: Annotated[float, Field(ge=-1, le=1, description=(
            "Embedding similarity two near-duplicates must reach; hashes at most "
            f"{CLOSE_DISTANCE} bits apart need only {CLOSE_MIN_COSINE}"))] = DEFAULT_MIN_COSINE,
    ) -> Annotated[CallToolResult, DuplicatesResult]:
        """List groups of near-identical photos in the user's gallery (copies resized, recompressed, slightly
        cropped or turned): each group's gallery ids and files, the one to keep first. Read-only: nothing is
        deleted. Loads no model."""
        def work(progress: Any) -> DuplicatesResult:
            progress(f"comparing the perceptual hashes of {gallery.count()} photos")
            return duplicates_result(gallery, limit=limit, max_distance=max_distance, min_cosine=min_cosine)

        found = await in_thread(ctx, work, first="find_duplicates: reading the stored hashes")
        done = result(found, text=found.summary)
        if thumbnails:
            done.content.extend(await in_thread(ctx, group_thumbnails, found.groups))
        return done
