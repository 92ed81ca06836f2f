"""What tasks run on: model backends (models/), the tools' sandbox and search index (tools/), settings, Ray, events
and storage (runtime/), and the questions and corpora (data/). Imports nothing of flows/ or tasks/."""
