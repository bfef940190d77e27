"""The MCP door: agents connect over the Model Context Protocol with their API keys.

One endpoint (``urls.py``, served at ``/mcp/`` by the site) speaks JSON-RPC over the
Streamable HTTP transport in its stateless form: each POST carries one message and gets
one ``application/json`` answer; there are no sessions and no server-sent events, so
the endpoint is a plain view of a WSGI site. The protocol shapes are the official SDK's
(``mcp_types``, pydantic models).

Nothing here decides access: a key is authenticated and throttled as in the REST API
(``memoryhub.api``), each call resolves its domain through ``resolve_domain`` (the
policy in ``memoryhub.policy``), and each tool calls the service its REST endpoint calls.
Failures carry the REST API's ``{code, detail, errors}`` bodies.
"""
