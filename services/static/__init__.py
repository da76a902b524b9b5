"""Static files of the web page (a package so they ship in the wheel)."""
