"""CultureKAR: culturebase."""
