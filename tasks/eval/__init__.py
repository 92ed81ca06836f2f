"""Scoring and measuring: benchmark scorers, metrics with intervals and paired differences, failure
attribution, memory contamination, Parquet table layouts, the Verifier's labeled cases."""
