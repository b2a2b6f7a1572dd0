"""trainers: torch models, data and the training loop; where they sit: docs/architecture.md."""
