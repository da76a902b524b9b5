"""The sound route: audio fingerprints of entity sound clips, their store and match, and the sounds of
imported records."""
