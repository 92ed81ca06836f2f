"""Benchmarks of the system itself: `make bench` (suite.py: orchestration, throughput, embedded tokens/s),
the llama.cpp build comparison (llama.py), the Flow-GRPO claim (`make bench-train`, train.py) and its pilot sweep
(sweep.py), and the headline tables (`make tables`, tables.py: records that pool across sessions); figures as JSON."""
