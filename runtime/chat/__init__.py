"""The chat layer, one for every front end (the CLI, the window and the API): a conversation that owns what a
turn needs and makes it (`runtime.chat.conversation`: Conversation, request_turn), its documents and the one
policy for offering their search (`runtime.chat.documents`: DocumentChoice), one turn assembled once
(`runtime.chat.turn`: TurnSpec, run_turn, assemble) with its tools (`runtime.chat.toolbox`: ToolSetup,
McpToolbox, open_toolbox). It sits above runtime.engine and below the surfaces. Import the modules themselves:
the toolbox loads the MCP SDK, which a turn without tools never needs."""
