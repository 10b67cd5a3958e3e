"""The chat layer: one turn assembled once (`runtime.chat.turn`: TurnSpec, run_turn, assemble) with its tools
(`runtime.chat.toolbox`: McpToolbox, open_toolbox), for every front end: the CLI, the window and the API. It
sits above runtime.engine and below the surfaces. Import the modules themselves: the toolbox loads the MCP
SDK, which a turn without tools never needs."""
