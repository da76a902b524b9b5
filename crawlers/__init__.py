"""CultureKAR: crawlers."""
