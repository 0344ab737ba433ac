"""An agent that can search your gallery and ask about a photo, through pictrieve's LangChain tools.

Needs a chat model with tool calling (the offline 135M model has none), e.g. any OpenAI-compatible
server::

    python examples/vsa_agent.py --gallery ./my.gallery --pages examples/vsa-offline/pages \
        --model openai:qwen2.5-7b-instruct --base-url http://localhost:8000/v1 \
        "Find my photo of a horse in the snow and tell me how many teeth a horse has."

The tools hand the model the photos they find as image blocks (a model that sees images sees them);
``--text-only`` keeps their output to text, for chat APIs that take pictures only in user messages.
The same tools, served to any agent app over MCP: ``pictrieve mcp`` (see ``examples/mcp_client.py``).
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("request")
    parser.add_argument("--gallery", required=True)
    parser.add_argument("--pages", default=None, help="local:DIR search instead of DuckDuckGo")
    parser.add_argument("--model", default="openai:gpt-4o-mini")
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--allow-dir", action="append", default=[],
                        help="a folder whose photos ask_about_image may read by path (default: gallery ids and base64 only)")
    parser.add_argument("--text-only", action="store_true", help="tools return no pictures, only text")
    args = parser.parse_args()

    from langchain.agents import create_agent

    from pictrieve.integrations.langchain_tools import ask_about_image_tool, ask_gallery_tool, image_search_tool
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.vectorstore.gallery import Gallery

    chat = create_chat_model(args.model, base_url=args.base_url)
    gallery = Gallery.open(args.gallery, create=False)
    pictures = not args.text_only
    tools = [image_search_tool(gallery, pictures=pictures),
             ask_about_image_tool(llm=chat, search=f"local:{args.pages}" if args.pages else "ddgs",
                                  gallery=gallery, allowed_dirs=args.allow_dir),  # photos by id, data or allowed path
             ask_gallery_tool(gallery, reader=chat, pictures=pictures)]  # visual RAG: answers from the best photos
    agent = create_agent(chat, tools)
    result = agent.invoke({"messages": [("user", args.request)]})
    print(result["messages"][-1].content)


if __name__ == "__main__":
    main()
