"""NEEDLE's parts (Nauman et al.): rank aggregation, embedder trust, guide screening, guide images.

Each module is pure and small so that it can be tested against hand-computed numbers; the graph in
:mod:`pictrieve.graphs.needle` wires them together.
"""
