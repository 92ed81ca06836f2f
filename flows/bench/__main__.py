"""`python -m flows.bench run|serve-scripted`: the system's own benchmarks (`make bench`)."""

from flows.bench.suite import bench_app

bench_app()
