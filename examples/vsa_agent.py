"""An agent that can search your gallery and ask about a photo, through pictrieve's LangChain tools.

Needs a chat model with tool calling (the offline 135M model has none), e.g. any OpenAI-compatible
server::

    python examples/vsa_agent.py --gallery ./my.gallery --pages examples/vsa-offline/pages \
        --model openai:qwen2.5-7b-instruct --base-url http://localhost:8000/v1 \
        "Find my photo of a horse in the snow and tell me how many teeth a horse has."
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
    args = parser.parse_args()

    from langgraph.prebuilt import create_react_agent

    from pictrieve.graphs.vision_search_tools import ask_about_image_tool, ask_gallery_tool, image_search_tool
    from pictrieve.tools.chat_models import create_chat_model
    from pictrieve.vectorstore.gallery import Gallery

    chat = create_chat_model(args.model, base_url=args.base_url)
    gallery = Gallery.open(args.gallery)
    tools = [image_search_tool(gallery),
             ask_about_image_tool(llm=chat, search=f"local:{args.pages}" if args.pages else "ddgs"),
             ask_gallery_tool(gallery, reader=chat)]  # visual RAG: answers from the best-matching photos
    agent = create_react_agent(chat, tools)
    result = agent.invoke({"messages": [("user", args.request)]})
    print(result["messages"][-1].content)


if __name__ == "__main__":
    main()
