"""The four modules of the loop (Planner, Executor, Verifier, Generator) and what they share:
prompts, worked examples, citation spans and the tools the Executor runs."""
