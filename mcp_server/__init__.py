"""``pictrieve mcp``: the gallery and the methods as a Model Context Protocol server, for any agent app.

Built on the official ``mcp`` Python SDK (FastMCP), over stdio (the default) or streamable HTTP. The parts:

- :mod:`.service`: what each tool does, as plain blocking calls over a gallery (graphs built from the method
  registry on first need, so listing tools and ``gallery_info`` answer at once);
- :mod:`.sessions`: PlugIR sessions (``find_photo`` / ``answer_question``) kept in a SQLite checkpointer, so
  they survive a server restart;
- :mod:`.schemas`: the tools' structured outputs (their ``outputSchema``);
- :mod:`.server`: the server (every failure as a one-line tool error, ``isError``), ``gallery_info`` and the
  resources; it registers the tools of :mod:`.search_tools`, :mod:`.answer_tools`, :mod:`.session_tools` and
  :mod:`.duplicates` (their JSON schemas and descriptions, written for a model);
- :mod:`.calls`: what the tools share: bounded text arguments, blocking work in worker threads with progress
  notifications, results with photos as MCP image content;
- :mod:`.http`: streamable HTTP on loopback by default, with an optional bearer token.

The package is not named ``mcp``: that would shadow the SDK.
"""
