"""`python -m flows.cli ...`: the `agentflow` command line."""

from flows.cli.app import main

main()
