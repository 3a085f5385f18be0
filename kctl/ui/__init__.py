"""Rich renderables; the core never renders (conventions rule 9)."""
