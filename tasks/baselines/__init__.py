"""The systems the modular loop is compared against, with the same model, tools and budget:
the direct answer (one call, no tools) and the monolithic ReAct agent (one context does everything)."""
