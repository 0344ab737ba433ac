"""A small web page over a gallery and the registered retrieval methods (``pictrieve ui``)."""

from pictrieve.ui.app import create_app

__all__ = ["create_app"]
