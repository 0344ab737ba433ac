// A client of `pictrieve mcp` written with the official TypeScript SDK (tests/test_mcp_typescript.py runs it).
// Usage: node client.mjs '<server command and arguments as a JSON array>' '<query>'
// Starts the server over stdio, lists its tools, calls search_images, and prints both as one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = JSON.parse(process.argv[2]);
const query = process.argv[3];
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "pictrieve-typescript-test", version: "1.0.0" });
await client.connect(transport);
try {
  const tools = await client.listTools();
  // The SDK checks structuredContent against the tool's outputSchema while it reads the result.
  const result = await client.callTool({ name: "search_images", arguments: { query, k: 2 } }, undefined,
                                       { timeout: 600000 });
  console.log(JSON.stringify({ tools: tools.tools.map((tool) => tool.name), result }));
} finally {
  await client.close();
}
