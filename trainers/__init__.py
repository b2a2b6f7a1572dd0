"""trainers: see DESIGN in README."""
