"""The Vision Search Assistant's LLM-backed steps (regions, planning, searching, answering).

See :mod:`pictrieve.graphs.vision_search` for the graph that wires them.
"""
