"""The `agentflow` command line: one module per command or group (app.py registers them all).
Each parses, calls a flow and prints; startup.py holds what they share (consoles, settings, preflight)."""
