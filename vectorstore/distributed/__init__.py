"""Indexing and tiling on a Ray cluster: many machines embed, one Chroma server stores.

Storage already runs on its own engine (a ``chroma run`` server); these jobs spread the embedding
over an existing distributed engine, `Ray Data <https://docs.ray.io/en/latest/data/data.html>`_,
instead of a pool of processes of our own:

- The driver (the ``pictrieve`` command) lists the files and asks the gallery which are unchanged,
  exactly as local indexing does (:func:`~pictrieve.vectorstore.indexing.start_index`: same skip
  rules, path-hash ids, captions, ``max_pixels`` guard), and creates the collections.
- A Ray Data pipeline hands the plan's files, in batches, to an actor pool of N workers
  (``map_batches`` with a callable class): each worker loads its models once, decodes every photo
  once for all embedders (:func:`~pictrieve.vectorstore.indexing.prepare_file`), embeds and
  upserts each batch to the Chroma server as soon as it is done, so a killed job resumes where it
  stopped and a retried batch rewrites the same ids. Workers hold only the server's ``http://``
  location, the embedder names and their share of the plan.
- The driver assembles the same :class:`~pictrieve.vectorstore.indexing.IndexReport` as local
  indexing from what the workers return.

Modules: :mod:`.cluster` (joining or starting Ray, sizing the worker pool; the only place that
imports Ray, and only when a job runs), :mod:`.pipeline` (the Ray Data pipeline both jobs share),
:mod:`.index_job` and :mod:`.tile_job` (the workers and drivers). Install with
``pip install "pictrieve[scale]"``.
"""
