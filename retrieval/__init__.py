"""CultureKAR: retrieval."""
