"""vectorstore"""
