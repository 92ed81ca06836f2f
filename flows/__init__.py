"""Prefect flows, the top floor: the research loop (research.py), batch, evaluate, train, review, and the command
line (cli/) and benchmarks (bench/) that start them. Imports tasks/ and infra/, never the other way."""
