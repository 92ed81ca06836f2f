"""Questions and corpora: the synthetic research world and its scripted oracle, and one adapter per
benchmark family that turns the original files into questions.jsonl and corpus.jsonl."""
