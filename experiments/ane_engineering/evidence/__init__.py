"""Evidence: provenance every output records (tool versions, harness fingerprint, machine)."""
