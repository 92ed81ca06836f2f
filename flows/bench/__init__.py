"""Benchmarks of the system itself: `make bench` (suite.py: orchestration, throughput, embedded tokens/s),
the llama.cpp build comparison (llama.py) and the Flow-GRPO claim (`make bench-train`, train.py); figures as JSON."""
