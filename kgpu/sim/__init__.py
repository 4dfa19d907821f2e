"""The trace-driven simulator: traces in, the same core, allocation curves and reports out."""
