"""One front door for plain search: a :class:`SearchRequest` in, a :class:`SearchAnswer` out.

Every front end asks for a plain search the same way and shows the same answer: ``pictrieve search``, the page's
Search tab, MCP's ``search_images``, the LangChain ``image_search`` tool and :class:`GalleryRetriever`, the search
graph (the served one too) and ``Gallery.search``. Each builds a :class:`SearchRequest` (its defaults are here and
nowhere else: hybrid on, k :data:`DEFAULT_K`, no filters), :func:`run_search` asks the store, and each renders the
:class:`SearchAnswer` (:meth:`SearchAnswer.summary` for a model, :meth:`SearchAnswer.notice` for a person), so no
front end can rank, filter or word an empty result its own way.

A request is a text ``query``, an ``image`` or a ``vector``, or none of them with ``filters``: browsing the photos
that pass the filters, newest first. A bad value is refused once, here, in words that name the field, what was
given and what is accepted (:class:`SearchRequestError`), so every front end says the same.

An answer's hits each carry why they are there (``matched_by``: ``vector``, ``words``, ``both``, or ``filters``
when browsing) and ``relevant``; an empty answer carries ``why``: that the gallery holds no photo, which filter
left nothing and what the gallery has instead, or that the relevance cutoff removed every photo found.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from pictrieve.vectorstore.errors import QueryError
from pictrieve.vectorstore.hits import ImageHit
from pictrieve.vectorstore.photo_filter import FilterError, PhotoFilter, parse_date, parse_near

PLAIN = "search"
"""The plain search method's name (the registry's ``search``): what :func:`run_search` answers itself."""

DEFAULT_K = 10
"""How many photos a request asks for when it does not say: ``pictrieve search`` (and ``--method``), the retriever,
the search graph (served too), ``Gallery.search`` and every method's ``k``. Two kinds of front end start from
another number, each for its reason: :data:`MODEL_K` and :data:`PAGE_K`."""

MODEL_K = 5
"""The default of the front ends that answer a model (MCP's ``search_images`` and ``search_by_image``, the LangChain
``image_search`` tool): each photo goes back as an image in the model's context, so five keep one answer small; the
model asks for more with ``k``."""

PAGE_K = 24
"""The page's default: its grid of thumbnails, where 24 fills whole rows at 2, 3, 4, 6 or 8 columns."""

FILTER_FIELDS: dict[str, str] = {
    "after": "a date as YYYY-MM-DD (or an ISO 8601 time): photos taken on or after it",
    "before": "a date as YYYY-MM-DD (or an ISO 8601 time): photos taken before it",
    "near": "\"LAT,LON\" or a city name such as \"Lisbon\" or \"Paris, FR\"",
    "radius_km": "a number of kilometres above 0 (around near; default 10)",
    "place": "words of a city, region or country (name or code) as text, e.g. \"lisbon\", \"Portugal\" or \"PT\"",
    "camera": "words of a camera's name, make or model as text, e.g. \"iphone\" or \"pixel 7\"",
    "folder": "a folder's path as text",
    "exif_dates_only": "true or false: with after/before, leave out photos dated only by their file (no EXIF time)",
}
"""The filters a request takes, each with what it accepts (the words of every refusal)."""

MatchedBy = Literal["vector", "words", "both", "filters"]


class SearchRequestError(QueryError):
    """A search request with a value it cannot take: ``field``, what was ``given`` and what is ``accepted``."""

    def __init__(self, field: str, given: Any, accepted: str) -> None:
        self.field, self.given, self.accepted = field, given, accepted
        super().__init__(f"{field}: {_shown(given)} is not accepted; it takes {accepted}")

    def worded(self, name: str) -> str:
        """The same refusal naming the field as a front end calls it (``--after`` on the command line)."""
        return f"{name}: {_shown(self.given)} is not accepted; it takes {self.accepted}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def parse_filters(filters: Any) -> PhotoFilter | None:
    """``filters`` (a :class:`PhotoFilter`, or a mapping of :data:`FILTER_FIELDS` to the words a person types) as
    a :class:`PhotoFilter`, ``None`` when there are none; a bad value is a :class:`SearchRequestError` naming it."""
    if filters is None:
        return None
    if isinstance(filters, PhotoFilter):
        return None if filters.is_empty else filters
    if not isinstance(filters, Mapping):
        raise SearchRequestError("filters", filters, "an object of " + ", ".join(FILTER_FIELDS)
                                 + ", e.g. {\"after\": \"2023-06-01\", \"near\": \"Lisbon\"}")
    unknown = sorted(str(key) for key in filters if key not in FILTER_FIELDS)
    if unknown:
        raise SearchRequestError("filters", unknown[0], "only " + ", ".join(FILTER_FIELDS))
    given = {key: value for key, value in filters.items() if value is not None and value != ""}
    for name in ("after", "before"):  # checked here, so the refusal names the field, not a command-line option
        if name in given:
            if not isinstance(given[name], str):
                raise SearchRequestError(name, given[name], FILTER_FIELDS[name])
            try:
                parse_date(given[name], name)
            except FilterError:
                raise SearchRequestError(name, given[name], FILTER_FIELDS[name]) from None
    if "near" in given:
        value = given["near"]
        if not isinstance(value, str) or not value.strip():
            raise SearchRequestError("near", value, FILTER_FIELDS["near"])
        try:
            parse_near(value)
        except FilterError as exc:
            raise SearchRequestError("near", value, "\"LAT,LON\" (latitude -90..90, longitude -180..180) or a city "
                                     "the offline gazetteer knows" + ("" if "install" not in str(exc)
                                                                      else " (install pictrieve[places] for cities)")) \
                from None
    if "radius_km" in given:
        given["radius_km"] = _radius(given["radius_km"])
    if "exif_dates_only" in given:
        given["exif_dates_only"] = _flag(given["exif_dates_only"])
    for name in ("place", "camera", "folder"):
        if name in given:
            value = given[name]
            if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
                raise SearchRequestError(name, value, FILTER_FIELDS[name])
            given[name] = str(value).strip()
    try:  # the filter's own reading of the words (dates, a city's position, a folder's path)
        found = PhotoFilter.parse(**given)
    except (FilterError, ValueError) as exc:  # pragma: no cover - each field was checked above
        raise SearchRequestError("filters", dict(filters), str(exc).splitlines()[0]) from None
    return None if found.is_empty else found


def _flag(value: Any) -> bool:
    """``exif_dates_only`` as given: a bool, or the words a form sends ("true", "on", "1", "false", ...)."""
    if isinstance(value, bool):
        return value
    words = {"true": True, "on": True, "yes": True, "1": True, "false": False, "off": False, "no": False, "0": False}
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise SearchRequestError("exif_dates_only", value, FILTER_FIELDS["exif_dates_only"])


def _radius(value: Any) -> float:
    if isinstance(value, bool):
        raise SearchRequestError("radius_km", value, FILTER_FIELDS["radius_km"])
    try:
        radius = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise SearchRequestError("radius_km", value, FILTER_FIELDS["radius_km"]) from None
    if not math.isfinite(radius) or radius <= 0:
        raise SearchRequestError("radius_km", value, FILTER_FIELDS["radius_km"])
    return radius


class SearchRequest(BaseModel):
    """What a plain search is asked for: the one type every front end builds (see the module docstring).

    Exactly one of ``query`` (words), ``image`` (a file path, or a PIL image from Python) and ``vector`` (in the
    gallery's embedding space), or none of them with ``filters`` to browse the photos that pass, newest first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    query: str | None = Field(default=None, description="What to find, in words.")
    image: Any = Field(default=None, description="A photo to search with instead of words (a path).")
    vector: list[float] | None = Field(default=None, description="A vector in the gallery's embedding space.")
    k: int = Field(default=DEFAULT_K, description="How many photos to return, best first.")
    filters: PhotoFilter | None = Field(default=None, description=(
        "Only photos whose own metadata match: " + "; ".join(f"{n}: {a}" for n, a in FILTER_FIELDS.items())))
    where: dict[str, Any] | None = Field(default=None, description=(
        "A Chroma-style where on stored metadata instead of filters (Python callers)."))
    hybrid: StrictBool = Field(default=True, description=(
        "Rank a text query by the photos' own words too (folder and file names, captions, place, photo text), "
        "fused with the vectors; false: by the vectors alone."))
    collapse_duplicates: StrictBool = Field(default=False, description=(
        "Show each group of near-identical photos once (the hit's copies lists the others)."))
    only_relevant: StrictBool = Field(default=False, description=(
        "Return only the photos that reach the relevance cutoff (maybe none: the answer says why)."))
    method: str = Field(default=PLAIN, description="The registered method that ranks (plain search by default).")

    @classmethod
    def of(cls, **fields: Any) -> "SearchRequest":
        """A request from a front end's values; a bad one is a :class:`SearchRequestError` naming the field (never
        pydantic's own words), so every front end refuses it alike. ``None`` means "the default"."""
        from pydantic import ValidationError

        given = {key: value for key, value in fields.items() if value is not None}
        try:
            return cls(**given)
        except ValidationError as exc:
            for error in exc.errors():
                if isinstance(error.get("ctx", {}).get("error"), SearchRequestError):
                    raise error["ctx"]["error"] from None
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first.get("loc", ())) or "request"
            raise SearchRequestError(field, first.get("input"), _ACCEPTED.get(field, first["msg"].lower())) from None

    @classmethod
    def from_input(cls, state: Mapping[str, Any], *, k: int | None = None,
                   only_relevant: bool | None = None) -> "SearchRequest":
        """The request a search graph's input ``state`` makes (``query``, ``image``, ``filters``, ``hybrid``,
        ``collapse_duplicates``; an ``image`` wins over a ``query``) with the run's ``k`` and ``only_relevant``."""
        image = state.get("image") or None
        return cls.of(query=None if image else state.get("query"), image=image, filters=state.get("filters") or None,
                      hybrid=state.get("hybrid"), collapse_duplicates=state.get("collapse_duplicates"), k=k,
                      only_relevant=only_relevant)

    @field_validator("query", mode="before")
    @classmethod
    def _query_text(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            raise SearchRequestError("query", value, _ACCEPTED["query"])
        return value.strip() or None

    @field_validator("k", mode="before")
    @classmethod
    def _k_count(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str)
                                                                          and not value.strip().isdigit()):
            raise SearchRequestError("k", value, _ACCEPTED["k"])
        if int(value) < 1:
            raise SearchRequestError("k", value, _ACCEPTED["k"])
        return int(value)

    @field_validator("filters", mode="before")
    @classmethod
    def _filters(cls, value: Any) -> Any:
        return parse_filters(value)

    @field_validator("vector", mode="before")
    @classmethod
    def _vector(cls, value: Any) -> Any:
        if value is None or isinstance(value, list):
            return value
        try:
            import numpy as np

            return np.asarray(value, dtype=float).reshape(-1).tolist()
        except (TypeError, ValueError):
            raise SearchRequestError("vector", value, _ACCEPTED["vector"]) from None

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, str) or hasattr(value, "convert"):  # a path, or a PIL image from Python
            return value
        raise SearchRequestError("image", value, _ACCEPTED["image"])

    @model_validator(mode="after")
    def _one_kind(self) -> "SearchRequest":
        given = [name for name in ("query", "image", "vector") if getattr(self, name) is not None]
        if len(given) > 1:
            raise SearchRequestError(" and ".join(given), "both", "one of a text query, an image or a vector")
        if self.filters is not None and self.where is not None:
            raise SearchRequestError("where", self.where, "nothing when filters are given (one or the other)")
        if not given and self.store_where is None:
            raise SearchRequestError("query", "", _ACCEPTED["nothing"])
        return self

    @property
    def browsing(self) -> bool:
        """No query, image or vector: the photos that pass the filters, newest first."""
        return self.query is None and self.image is None and self.vector is None

    @property
    def store_where(self) -> PhotoFilter | dict[str, Any] | None:
        """What the store filters by: the filters, or a Python caller's Chroma-style ``where``."""
        return self.filters if self.filters is not None else self.where

    def filters_json(self) -> dict[str, Any]:
        """The filters given, as JSON (for ``--json`` and the served answer)."""
        if self.filters is None:
            return dict(self.where or {})
        return self.filters.model_dump(mode="json", exclude_defaults=True)


_ACCEPTED = {
    "query": "words saying what the photos should show",
    "image": "a photo's file path",
    "vector": "a list of numbers in the gallery's embedding space",
    "k": "a whole number of photos, 1 or more",
    "hybrid": "true or false",
    "collapse_duplicates": "true or false",
    "only_relevant": "true or false",
    "method": "a registered method's name",
    "where": "a Chroma-style where object",
    "nothing": "words saying what to find, an image, or filters to browse by (after, before, near, place, camera, "
               "folder)",
}


class SearchAnswer(BaseModel):
    """What a plain search answers, shown alike by every front end.

    ``hits`` best first (with ``only_relevant``, just those that reach the cutoff), each with ``matched_by`` and
    ``relevant``; ``found``: how many the search returned before ``only_relevant``; ``relevant_count``: how many
    of those match well; ``why``: when ``hits`` is empty, why (else ``""``)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    request: SearchRequest
    hits: list[ImageHit]
    found: int = 0
    relevant_count: int = 0
    why: str = ""

    @classmethod
    def of_hits(cls, request: SearchRequest, found: Sequence[ImageHit], why: str = "") -> "SearchAnswer":
        """The answer for the hits a search (of any method) found, ``only_relevant`` applied."""
        shown = [h for h in found if h.relevant is not False] if request.only_relevant else list(found)
        if not shown and not why and found:
            why = (f"{len(found)} {_photos(len(found))} came closest, but none matches well enough to pass the "
                   "relevance cutoff")
        return cls(request=request, hits=shown, found=len(found),
                   relevant_count=sum(1 for h in found if h.relevant is not False), why=why if not shown else "")

    @classmethod
    def of_run(cls, state: Mapping[str, Any], output: Mapping[str, Any], *, k: int | None = None,
               only_relevant: bool | None = None) -> "SearchAnswer":
        """The answer of a search graph's run: its input ``state``, the run's ``k`` and ``only_relevant``, and its
        ``output`` (``hits``, maybe as JSON from a served graph, and ``why``), for a front end to render."""
        from pictrieve.vectorstore.hits import as_hit

        request = SearchRequest.from_input(state, k=k, only_relevant=only_relevant)
        return cls.of_hits(request, [as_hit(hit) for hit in output.get("hits") or []], str(output.get("why") or ""))

    @property
    def ids(self) -> list[str]:
        return [hit.id for hit in self.hits]

    @property
    def none_relevant(self) -> bool:
        """Photos were found and none matches well (the "only the closest" case)."""
        return self.found > 0 and self.relevant_count == 0

    def what(self) -> str:
        """The request in words: ``'a dog'``, ``the given photo``, ``the filters``."""
        request = self.request
        if request.query is not None:
            return repr(request.query)
        if request.image is not None or request.vector is not None:
            return "the given photo"
        return "the filters"

    def summary(self) -> str:
        """One or two sentences a model can pass on as they are: how many photos match, or why none is shown."""
        what = self.what()
        n = len(self.hits)
        if not n:
            return f"No photo shown for {what}: {self.why}."
        if self.request.browsing:
            return f"{n} {_photos(n)} {'passes' if n == 1 else 'pass'} the filters, newest first."
        if self.none_relevant:
            closest = "; ".join(f"{h.id}" + (f" ({h.caption})" if h.caption else "") for h in self.hits[:3])
            return f"No photo in the gallery matches {what} well; the closest are: {closest}."
        if all(h.relevant is None for h in self.hits):
            return f"{n} {_photos(n)} found for {what}, best first (how well they match was not judged)."
        good = sum(1 for h in self.hits if h.relevant is not False)
        if good == n:
            return (f"The photo shown matches {what} well." if n == 1
                    else f"All {n} photos shown match {what} well.")
        return (f"{good} of the {n} photos shown {'matches' if good == 1 else 'match'} {what} well; the other "
                f"{n - good} {'is' if n - good == 1 else 'are'} only the closest.")

    def notice(self) -> str:
        """The line a person reads above the hits: why nothing is shown, or that none matches well (else ``""``)."""
        from pictrieve.vectorstore.relevance import NO_MATCH_HEADER

        if not self.hits:
            return f"nothing found: {self.why}"
        if self.none_relevant:
            return NO_MATCH_HEADER
        return ""

    def to_json(self) -> dict[str, Any]:
        """The answer as JSON: the hits, ``found``, ``relevant_count``, ``why``, ``notice`` and ``summary``."""
        return {"hits": [hit.to_json() for hit in self.hits], "found": self.found,
                "relevant_count": self.relevant_count, "why": self.why, "notice": self.notice(),
                "summary": self.summary()}


def _photos(n: int) -> str:
    return "photo" if n == 1 else "photos"


def run_search(store: Any, request: SearchRequest) -> SearchAnswer:
    """Answer a plain-search ``request`` over ``store`` (any :class:`~pictrieve.vectorstore.store.ImageStore`): the
    one place that asks the store for a plain search. Another method's request is refused: its front end runs
    that method's graph and wraps the hits with :meth:`SearchAnswer.of_hits`."""
    if request.method != PLAIN:
        raise SearchRequestError("method", request.method, f"'{PLAIN}' here (run another method's graph instead)")
    if request.browsing:
        return browse(store, request)
    options: dict[str, Any] = {"where": request.store_where}
    if request.collapse_duplicates:
        options["collapse_duplicates"] = True
    if request.query is not None:
        hits = store.search_text(request.query, k=request.k, hybrid=request.hybrid, **options)
    elif request.image is not None:
        hits = store.search_image(request.image, k=request.k, **options)
    else:
        hits = store.search_vector(request.vector, k=request.k, **options)
    hits = [hit if hit.matched_by is not None else hit.model_copy(update={"matched_by": "vector"}) for hit in hits]
    why = "" if hits else why_empty(store, request)
    return SearchAnswer.of_hits(request, hits, why)


def browse(store: Any, request: SearchRequest) -> SearchAnswer:
    """The photos that pass the request's filters, newest first (photos without a time last, then by path)."""
    where = request.store_where
    if where is None:
        raise SearchRequestError("query", "", _ACCEPTED["nothing"])
    passing = store.metadata_where(store.ids(), where)
    newest = sorted(passing.items(), key=lambda row: (row[1].get("taken_at_ts") is None,
                                                      -float(row[1].get("taken_at_ts") or 0),
                                                      str(row[1].get("path", ""))))
    hits = [ImageHit.from_record(id_, meta, rank=rank).model_copy(update={"matched_by": "filters"})
            for rank, (id_, meta) in enumerate(newest[: request.k], start=1)]
    return SearchAnswer.of_hits(request, hits, "" if hits else why_empty(store, request))


# --- why nothing came back -------------------------------------------------------------------------------------

def why_empty(store: Any, request: SearchRequest) -> str:
    """Why a search found nothing: the gallery holds no photo, or which filter left none and what the gallery has
    (:func:`~pictrieve.vectorstore.filter_explain.explain_filter`)."""
    if not store.count():
        return "the gallery holds no photos yet"
    where = request.store_where
    if isinstance(where, PhotoFilter):
        from pictrieve.vectorstore.filter_explain import explain_filter

        return explain_filter(store, where).message
    if where:
        return "no photo passes the where filter"
    return "the search returned no photo"
