"""tools/embedders"""
