"""Filtered search at 100k records: p50/p95 of ``Gallery.search_vector`` with and without each filter kind.

A photo search is asked "the beach photos from last June", "pictures from Lisbon", "the ones from my old
camera": a :class:`~pictrieve.vectorstore.photo_filter.PhotoFilter` applied in the store (Chroma ``where``).
This measures what each kind costs on a gallery of 100,000 records, and whether a filtered search still
returns ``k`` hits when ``k`` photos pass the filter (and how many of the exact filtered top ``k`` it finds).

The gallery is an embedded Chroma folder holding synthetic vectors of the offline default embedder's
dimension (384; unit vectors around 2,000 cluster centres, as in ``search_latency.py``) with the metadata
indexing stores (:func:`~pictrieve.tools.core.photo_metadata.read_photo_metadata`): capture times over ten
years, 60 places (most photos from a few, Zipf-like) with GPS near each, 70% of photos with a position,
25 cameras (90% of photos name one), folders by month. Every query runs every filter kind in turn
(interleaved, so the kinds share the machine's load):

- ``none``; ``date_month`` (a random month), ``date_year`` (a random year); ``place`` (a city by name);
  ``near`` (within 25 km of a city: a box in the store, the exact distance checked after);
  ``camera``; ``folder`` (one month's folder); ``combined`` (a year + a country + a camera).

Run (the build takes minutes; it is kept in --store and reused):

    python benchmarks/filtered_search_p95.py --store /tmp/pictrieve-filtered-100k --build-only
    python benchmarks/filtered_search_p95.py --store /tmp/pictrieve-filtered-100k --queries 200 --json --before

``--before`` also times each search as it ran before the filter columns (:func:`search_as_before`: Chroma's
``where`` in the store), interleaved with the search of now on the same query and filter.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384
"""The offline default embedder's dimension."""
START = dt.datetime(2015, 1, 1, tzinfo=dt.timezone.utc)
YEARS = 10

CITIES = [  # (city, region, country code, lat, lon)
    ("Lisbon", "Lisbon", "PT", 38.72, -9.14), ("Porto", "Porto", "PT", 41.15, -8.61),
    ("Madrid", "Madrid", "ES", 40.42, -3.70), ("Barcelona", "Catalonia", "ES", 41.39, 2.17),
    ("Paris", "Ile-de-France", "FR", 48.86, 2.35), ("Lyon", "Auvergne-Rhone-Alpes", "FR", 45.76, 4.84),
    ("Berlin", "Berlin", "DE", 52.52, 13.40), ("Munich", "Bavaria", "DE", 48.14, 11.58),
    ("London", "England", "GB", 51.51, -0.13), ("Edinburgh", "Scotland", "GB", 55.95, -3.19),
    ("Rome", "Lazio", "IT", 41.90, 12.50), ("Milan", "Lombardy", "IT", 45.46, 9.19),
    ("Amsterdam", "North Holland", "NL", 52.37, 4.90), ("Vienna", "Vienna", "AT", 48.21, 16.37),
    ("Prague", "Prague", "CZ", 50.08, 14.44), ("Warsaw", "Masovia", "PL", 52.23, 21.01),
    ("Athens", "Attica", "GR", 37.98, 23.73), ("Istanbul", "Istanbul", "TR", 41.01, 28.98),
    ("New York City", "New York", "US", 40.71, -74.01), ("San Francisco", "California", "US", 37.77, -122.42),
    ("Chicago", "Illinois", "US", 41.88, -87.63), ("Toronto", "Ontario", "CA", 43.65, -79.38),
    ("Mexico City", "Mexico City", "MX", 19.43, -99.13), ("Sao Paulo", "Sao Paulo", "BR", -23.55, -46.63),
    ("Buenos Aires", "Buenos Aires", "AR", -34.60, -58.38), ("Tokyo", "Tokyo", "JP", 35.68, 139.69),
    ("Kyoto", "Kyoto", "JP", 35.01, 135.77), ("Seoul", "Seoul", "KR", 37.57, 126.98),
    ("Beijing", "Beijing", "CN", 39.90, 116.41), ("Bangkok", "Bangkok", "TH", 13.76, 100.50),
    ("Singapore", "Singapore", "SG", 1.35, 103.82), ("Sydney", "New South Wales", "AU", -33.87, 151.21),
    ("Cape Town", "Western Cape", "ZA", -33.92, 18.42), ("Nairobi", "Nairobi", "KE", -1.29, 36.82),
    ("Cairo", "Cairo", "EG", 30.04, 31.24), ("Marrakesh", "Marrakesh-Safi", "MA", 31.63, -7.99),
    ("Reykjavik", "Capital Region", "IS", 64.15, -21.94), ("Oslo", "Oslo", "NO", 59.91, 10.75),
    ("Stockholm", "Stockholm", "SE", 59.33, 18.07), ("Helsinki", "Uusimaa", "FI", 60.17, 24.94),
    ("Dublin", "Leinster", "IE", 53.35, -6.26), ("Brussels", "Brussels", "BE", 50.85, 4.35),
    ("Zurich", "Zurich", "CH", 47.38, 8.54), ("Budapest", "Budapest", "HU", 47.50, 19.04),
    ("Krakow", "Lesser Poland", "PL", 50.06, 19.94), ("Seville", "Andalusia", "ES", 37.39, -5.98),
    ("Faro", "Faro", "PT", 37.02, -7.93), ("Funchal", "Madeira", "PT", 32.65, -16.91),
    ("Nice", "Provence-Alpes-Cote d'Azur", "FR", 43.70, 7.27), ("Venice", "Veneto", "IT", 45.44, 12.32),
    ("Florence", "Tuscany", "IT", 43.77, 11.26), ("Naples", "Campania", "IT", 40.85, 14.27),
    ("Dubrovnik", "Dubrovnik-Neretva", "HR", 42.65, 18.09), ("Hanoi", "Hanoi", "VN", 21.03, 105.85),
    ("Bali", "Bali", "ID", -8.34, 115.09), ("Lima", "Lima", "PE", -12.05, -77.04),
    ("Cusco", "Cusco", "PE", -13.53, -71.97), ("Havana", "Havana", "CU", 23.11, -82.37),
    ("Vancouver", "British Columbia", "CA", 49.28, -123.12), ("Boston", "Massachusetts", "US", 42.36, -71.06),
]
CAMERAS = [("Apple", f"iPhone {n}") for n in (6, 7, 8, "X", 11, 12, 13, 14, 15)] + \
    [("Google", f"Pixel {n}") for n in (3, 4, 5, 6, 7, 8)] + \
    [("Canon", m) for m in ("Canon EOS 5D Mark III", "Canon EOS R6", "Canon PowerShot G7 X")] + \
    [("NIKON CORPORATION", m) for m in ("NIKON D750", "NIKON Z 6")] + \
    [("SONY", m) for m in ("ILCE-7M3", "DSC-RX100M5")] + [("FUJIFILM", "X-T3"), ("samsung", "SM-G991B")]


@dataclass
class Records:
    """The synthetic gallery's fields as numpy arrays (the exact answers are computed from them)."""

    vectors: np.ndarray
    ts: np.ndarray
    city: np.ndarray  # index into CITIES, -1: no position
    lat: np.ndarray
    lon: np.ndarray
    camera: np.ndarray  # index into CAMERAS, -1: none
    folder: list[str]


def zipf_choice(rng: np.random.Generator, n: int, size: int, s: float = 1.1) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** s
    return rng.choice(n, size=size, p=weights / weights.sum())


def make_records(n: int, seed: int = 0) -> Records:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2000, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.6 / np.sqrt(DIM), size=(n, DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    span = int(dt.timedelta(days=365 * YEARS).total_seconds())
    ts = int(START.timestamp()) + rng.integers(0, span, n)
    city = np.where(rng.random(n) < 0.7, zipf_choice(rng, len(CITIES), n), -1)
    lat = np.array([CITIES[c][3] if c >= 0 else 0.0 for c in city]) + rng.normal(scale=0.05, size=n)
    lon = np.array([CITIES[c][4] if c >= 0 else 0.0 for c in city]) + rng.normal(scale=0.05, size=n)
    camera = np.where(rng.random(n) < 0.9, zipf_choice(rng, len(CAMERAS), n, s=0.8), -1)
    folder = [f"/photos/{when:%Y}/{when:%Y-%m}" for when in
              (dt.datetime.fromtimestamp(int(t), dt.timezone.utc) for t in ts)]
    return Records(vectors, ts, city, lat, lon, camera, folder)


def metadata(records: Records, i: int) -> dict[str, Any]:
    """Record ``i``'s metadata as indexing stores it (flat scalars)."""
    when = dt.datetime.fromtimestamp(int(records.ts[i]), dt.timezone.utc)
    meta: dict[str, Any] = {
        "path": f"{records.folder[i]}/IMG_{i:06d}.jpg", "name": f"IMG_{i:06d}.jpg", "folder": records.folder[i],
        "taken_at": when.isoformat(), "taken_at_ts": int(records.ts[i]), "taken_at_source": "exif",
        "width": 4032, "height": 3024, "orientation": 1, "reader": 1, "size": 2_000_000 + i,
        "sha256": f"{i:064x}",
    }
    if records.city[i] >= 0:
        city, region, country, _, _ = CITIES[records.city[i]]
        meta.update(gps_lat=round(float(records.lat[i]), 6), gps_lon=round(float(records.lon[i]), 6),
                    place=f"{city}, {region}, {country}", place_city=city, place_region=region, place_country=country)
    if records.camera[i] >= 0:
        make, model = CAMERAS[records.camera[i]]
        meta.update(camera_make=make, camera_model=model,
                    camera=model if model.lower().startswith(make.lower()) else f"{make} {model}")
    return meta


class SyntheticEmbedder:
    """Only a name and a dimension: vectors are written directly and queries come as vectors."""

    name = "benchmark:synthetic-384"
    dim = DIM


def build(store: Path, records: Records) -> tuple[Any, float]:
    """Store the records in an embedded gallery at ``store`` (resumes a partly built one)."""
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(store, SyntheticEmbedder())
    n, step = len(records.vectors), 2000
    start = time.perf_counter()
    for i in range(gallery.count(), n, step):
        ids = range(i, min(n, i + step))
        gallery.upsert([f"r{j}" for j in ids], records.vectors[i:i + step], [metadata(records, j) for j in ids])
        logging.info("stored %d / %d", min(n, i + step), n)
    return gallery, time.perf_counter() - start


def filters_for(records: Records, rng: np.random.Generator) -> dict[str, tuple[Any, np.ndarray]]:
    """One filter of each kind (a :class:`PhotoFilter`) and the mask of records that pass it."""
    from pictrieve.vectorstore.photo_filter import EARTH_RADIUS_KM, PhotoFilter

    year = int(rng.integers(START.year, START.year + YEARS))
    month = int(rng.integers(1, 13))
    m_start = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc)
    m_end = dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=dt.timezone.utc)
    y_start, y_end = dt.datetime(year, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(year + 1, 1, 1, tzinfo=dt.timezone.utc)
    in_range = lambda a, b: (records.ts >= int(a.timestamp())) & (records.ts < int(b.timestamp()))  # noqa: E731
    city = int(zipf_choice(rng, len(CITIES), 1)[0])
    camera = int(zipf_choice(rng, len(CAMERAS), 1, s=0.8)[0])
    cam_name = CAMERAS[camera][1]
    cam_mask = records.camera == camera
    country = CITIES[city][2]
    country_mask = np.isin(records.city, [i for i, c in enumerate(CITIES) if c[2] == country])
    folder = f"/photos/{year}/{year}-{month:02d}"
    near = (CITIES[city][3], CITIES[city][4])
    with_pos = records.city >= 0
    lat1, lon1, lat2, lon2 = np.radians(near[0]), np.radians(near[1]), np.radians(records.lat), np.radians(records.lon)
    h = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    dists = np.where(with_pos, 2 * EARTH_RADIUS_KM * np.arcsin(np.minimum(1.0, np.sqrt(h))), 1e9)  # as distance_km
    return {
        "none": (None, np.ones(len(records.ts), bool)),
        "date_month": (PhotoFilter(after=m_start, before=m_end), in_range(m_start, m_end)),
        "date_year": (PhotoFilter(after=y_start, before=y_end), in_range(y_start, y_end)),
        "place": (PhotoFilter(place=CITIES[city][0]), records.city == city),
        "near": (PhotoFilter(near=near, radius_km=25.0), dists <= 25.0),
        "camera": (PhotoFilter(camera=cam_name), cam_mask),
        "folder": (PhotoFilter(folder=folder), np.array([f == folder for f in records.folder])),
        "combined": (PhotoFilter(after=y_start, before=y_end, place=country, camera=cam_name),
                     in_range(y_start, y_end) & country_mask & cam_mask),
    }


def search_as_before(gallery: Any, vector: np.ndarray, k: int, photo_filter: Any) -> list[str]:
    """The filtered search before the filter columns (up to commit a1fb873): Chroma's ``where`` in the store, ``near``'s
    radius checked on the candidates, asking for 4 times more until ``k`` pass or the store has no more."""
    from pictrieve.vectorstore.gallery import chroma_collection

    collection = chroma_collection(gallery)
    where = photo_filter.where() if photo_filter is not None else None
    wanted = k * 4 if photo_filter is not None and photo_filter.near else k
    while True:
        found = collection.query(query_embeddings=[vector.tolist()], n_results=wanted, where=where,
                                 include=["metadatas", "distances"])
        ids = [id_ for id_, meta in zip(found["ids"][0], found["metadatas"][0])
               if photo_filter is None or photo_filter.accepts(meta or {})]
        if len(found["ids"][0]) < wanted or len(ids) >= k:
            return ids[:k]
        wanted *= 4


def measure(gallery: Any, records: Records, queries: int, k: int, before: bool = False) -> dict[str, Any]:
    rng = np.random.default_rng(1)
    picks = rng.integers(0, len(records.vectors), queries)
    noise = rng.normal(scale=0.3 / np.sqrt(DIM), size=(queries, DIM))
    query_vectors = records.vectors[picks] + noise
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    gallery.search_vector(query_vectors[0], k=k)  # warm-up: loads the index
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    t0 = time.perf_counter()
    gallery.search_vector(query_vectors[0], k=k, where=PhotoFilter(camera=CAMERAS[0][1]))  # reads the filter columns
    first_filtered_s = time.perf_counter() - t0
    rows: dict[str, dict[str, list[float]]] = {}
    sides = ("before", "after") if before else ("after",)
    for q in query_vectors:
        for kind, (photo_filter, mask) in filters_for(records, rng).items():
            passing = int(mask.sum())
            expected = min(k, passing)
            candidates = np.flatnonzero(mask)
            exact = {f"r{j}" for j in candidates[np.argsort(-(records.vectors[candidates] @ q))[:expected]]}
            for side in sides:  # interleaved: the two share the machine's load
                row = rows.setdefault(kind if side == "after" else f"{kind} (before)",
                                      {"times": [], "full": [], "recall": [], "passing": []})
                t0 = time.perf_counter()
                if side == "after":
                    ids = [hit.id for hit in gallery.search_vector(q, k=k, where=photo_filter)]
                else:
                    ids = search_as_before(gallery, q, k, photo_filter)
                row["times"].append(time.perf_counter() - t0)
                row["full"].append(float(len(ids) == expected))
                row["recall"].append(len(exact & set(ids)) / max(1, expected))
                row["passing"].append(passing)
    out = {}
    for kind, row in rows.items():
        ms = np.asarray(row["times"]) * 1000
        out[kind] = {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
                     "returned_k_share": round(float(np.mean(row["full"])), 3),
                     "recall_vs_exact_filtered": round(float(np.mean(row["recall"])), 3),
                     "median_passing": int(np.median(row["passing"]))}
    return {"first_filtered_search_s": round(first_filtered_s, 2), **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--store", type=Path, required=True, help="the gallery folder (kept and reused; not in the repo)")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--before", action="store_true",
                        help="also time the search as it was before the filter columns (Chroma's where), interleaved")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pictrieve").setLevel(logging.ERROR)
    records = make_records(args.records)
    gallery, build_s = build(args.store, records)
    logging.info("gallery of %d records ready (%.0f s building)", gallery.count(), build_s)
    if args.build_only:
        return
    result = {"records": len(records.vectors), "k": args.k, "queries": args.queries,
              "kinds": measure(gallery, records, args.queries, args.k, args.before)}
    print(json.dumps(result, indent=2) if args.json else result)


if __name__ == "__main__":
    main()
