"""CultureKAR: services."""
