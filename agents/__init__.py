"""CultureKAR: agents."""
