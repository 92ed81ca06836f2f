"""The tools' machinery: the sandbox that runs the python tool in a separate, limited process, and the
BM25 search index over a corpus file."""
