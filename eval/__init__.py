"""CultureKAR: eval."""
