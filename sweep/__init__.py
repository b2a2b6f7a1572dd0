"""sweep: see DESIGN in README."""
