"""results: see DESIGN in README."""
