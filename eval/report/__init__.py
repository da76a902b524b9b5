"""Reports: VIKR (:mod:`.vikr`), benchmark-family tasks (:mod:`.tasks`), reference-based
(:mod:`.refs`); JSON and number formatting shared by all three (:mod:`.common`)."""
