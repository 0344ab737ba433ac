"""tools.web: what the Vision Search Assistant reads: search backends (:mod:`.search`, offline
:mod:`.local_pages`), safe page fetching (:mod:`.fetch`) and page text (:mod:`.page_text`).

May import :mod:`pictrieve.tools.models` (the local pages are embedded with the sentence encoder) and
:mod:`pictrieve.tools.core`.
"""
