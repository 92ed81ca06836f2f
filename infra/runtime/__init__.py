"""Where runs run: typed settings, Ray (joining a cluster, tool and model-server actors), JSON events,
Parquet storage on disk or S3, and the store of memory across runs."""
