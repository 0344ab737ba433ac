"""pictrieve inside other frameworks' agents: a front end beside the page, MCP and the command line.

- :mod:`.langchain_tools`: ``image_search``, ``ask_about_image`` and ``ask_gallery`` as LangChain tools.

(The LangChain retriever, :class:`~pictrieve.vectorstore.retriever.GalleryRetriever`, lives with the store.)
"""
